"""Command allow-lists: which job commands a member with `allowed_commands` may run.

The owner table asks this of every member (a refused job goes to the next eligible one), so
the answer depends only on the job's argv[0], its env's names and the member's patterns:
the same on every host.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache


@lru_cache(maxsize=256)
def _allow_list_regex(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


# Environment variables that change what an allowed program loads or runs: a job may not set
# them on a member with an allow-list (LD_PRELOAD would run any code inside /usr/bin/true).
LOADER_PREFIXES = (
    *("LD_", "DYLD_", "PYTHON", "PERL", "RUBY", "BASH_FUNC_", "GCONV_", "NODE_"),
    *("OPENSSL_", "GIT_", "LUA_", "GTK_", "QT_"),  # config that loads modules or runs helpers
)
LOADER_VARIABLES = frozenset(
    {
        "PATH",
        "BASH_ENV",
        "ENV",
        "IFS",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "LOCPATH",
        "NLSPATH",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "HOSTALIASES",
        "TCLLIBPATH",
        "ZDOTDIR",
        "GLIBC_TUNABLES",
        "PHPRC",
        "PHP_INI_SCAN_DIR",
    }
)


def loader_variable(name: str) -> bool:
    return name.upper() in LOADER_VARIABLES or name.upper().startswith(LOADER_PREFIXES)


def command_refusal(
    patterns: Sequence[str] | None, program: str, env_names: Iterable[str] = ()
) -> str | None:
    """Why an allow-list (absolute fnmatch patterns, case-sensitive) refuses a job's command
    (`program`: its argv[0]; `env_names`: the variables the job sets); None: it admits it.

    None for `patterns` means no allow-list: everything is allowed. With one, the program
    must be an absolute path in normal form: `/usr/bin/../../tmp/x` cannot slip through
    `/usr/bin/*`, a relative path would depend on the job's workdir and a bare name on a PATH
    (which differs between hosts: the owner table must come out the same on every member).
    """
    if patterns is None:
        return None
    loaders = sorted(name for name in env_names if loader_variable(name))
    if loaders:
        return (
            f"the job sets {', '.join(loaders)} in its env, which could change what the "
            "allowed program runs; a member with allowed_commands refuses that"
        )
    if not program.startswith("/"):
        return (
            f"{program!r} is not an absolute path; with allowed_commands a job names its "
            "program by its full path (e.g. /usr/bin/...)"
        )
    if posixpath.normpath(program) != program:
        return f"{program!r} is not a normal path"
    if not _allow_list_regex(tuple(patterns)).match(program):
        return f"{program!r} is not in this member's allowed_commands"
    return None


def command_allowed(
    patterns: Sequence[str] | None, program: str, env_names: Iterable[str] = ()
) -> bool:
    """Whether an allow-list admits the command (see `command_refusal`)."""
    return command_refusal(patterns, program, env_names) is None
