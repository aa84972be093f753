"""Who owns which job: rendezvous (highest-random-weight) hashing over the live members.

A pure function of (job, required labels, members). Every member computes the same table from
the same member list, so no messages are needed between them.

Hash input, documented because every host must agree on it byte for byte:

    weight(job, member) = mmh3.hash128(job + "\\x00" + member_id, seed=0, x64arch=True,
                                       signed=False)   # MurmurHash3_x64_128, unsigned

encoded as UTF-8. The eligible member (its labels include every key=value pair the job asks
for, and whose command allow-list, if it has one, admits the job's argv[0]; for a function
job, an app member that registered the function with the very spec in the table; for a
command job, a daemon) with the highest weight owns the job; on an exact tie the larger
member id wins. Member
ids (`<hostname>-<pid>`) rather than znode names are hashed, so a member that rejoins on a
new session keeps the jobs it had.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import mmh3

from zksched.core.jobspec import JobSpec
from zksched.core.names import name_problem

_EMPTY: Mapping[str, str] = MappingProxyType({})
# (job, labels, program, env names, function, apps only): what eligibility depends on
_OwnerKey = tuple[
    str, frozenset[tuple[str, str]], str | None, frozenset[str], tuple[str, str] | None, bool
]
MAX_FUNCTIONS = 2_000  # function jobs one app member may register (its record < 1 MB)


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


@dataclass(frozen=True)
class Member:
    """One live member of a cluster, as its znode describes it."""

    member_id: str
    host: str = ""
    pid: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    started_at: str = ""
    version: str = ""
    znode: str = ""
    allowed_commands: tuple[str, ...] | None = None  # None: every command is allowed
    # None: a daemon (runs command jobs). A mapping: an app member (zksched.Cluster) that
    # runs only the function jobs it registered: job name -> the spec's definition_hash
    functions: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        # Frozen and hashable all the way down: labels become a read-only view.
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        if self.allowed_commands is not None:
            object.__setattr__(self, "allowed_commands", tuple(self.allowed_commands))
        if self.functions is not None:
            object.__setattr__(self, "functions", MappingProxyType(dict(self.functions)))

    def __hash__(self) -> int:
        return hash((self.member_id, self.znode))

    def eligible_for(
        self,
        required: Mapping[str, str],
        program: str | None = None,
        env_names: frozenset[str] = frozenset(),
        function: tuple[str, str] | None = None,
    ) -> bool:
        """Labels include `required`; for a command job (`program`, its argv[0]), a daemon
        whose allow-list admits it run with a job env that sets `env_names`; for a function
        job (`function`: name, spec hash), an app member that registered it with that spec.
        Neither asked: by labels alone."""
        if not all(self.labels.get(key) == value for key, value in required.items()):
            return False
        if function is not None:
            return self.functions is not None and self.functions.get(function[0]) == function[1]
        if program is None:
            return True
        return self.functions is None and command_allowed(self.allowed_commands, program, env_names)

    def to_record(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "host": self.host,
            "pid": self.pid,
            "labels": dict(self.labels),
            "started_at": self.started_at,
            "version": self.version,
            "znode": self.znode,
            "allowed_commands": (
                list(self.allowed_commands) if self.allowed_commands is not None else None
            ),
            **({} if self.functions is None else {"functions": dict(self.functions)}),
        }


def weight(job: str, member_id: str) -> int:
    """The rendezvous weight of `member_id` for `job` (see the module docstring)."""
    return int(mmh3.hash128(f"{job}\x00{member_id}".encode(), seed=0, x64arch=True, signed=False))


def sequence_of(znode: str) -> int:
    """The sequence number ZooKeeper appended to a sequential znode name (-1 if none)."""
    tail = znode.rsplit(".", 1)[-1]
    # ASCII only: str.isdigit() also admits digits such as "²" that int() refuses
    return int(tail) if tail.isascii() and tail.isdigit() else -1


class OwnerTable:
    """The owner of every job, given the live members. Immutable; lookups are memoised.

    Members that share a member id (a stale node of the same process) count once; the one
    with the highest znode sequence stands for it.
    """

    def __init__(self, members: Iterable[Member] = ()) -> None:
        newest: dict[str, Member] = {}
        for member in members:
            seen = newest.get(member.member_id)
            if seen is None or sequence_of(member.znode) > sequence_of(seen.znode):
                newest[member.member_id] = member
        self._members: tuple[Member, ...] = tuple(
            sorted(newest.values(), key=lambda m: m.member_id)
        )
        self._ids = tuple(m.member_id for m in self._members)
        self._memo: dict[_OwnerKey, str | None] = {}
        self._any_allow_list = any(m.allowed_commands is not None for m in self._members)
        self._any_app = any(m.functions is not None for m in self._members)

    @property
    def members(self) -> tuple[Member, ...]:
        return self._members

    @property
    def member_ids(self) -> tuple[str, ...]:
        return self._ids

    def __len__(self) -> int:
        return len(self._members)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OwnerTable) and self._members == other._members

    def __hash__(self) -> int:
        return hash(self._members)

    def job_owner(self, name: str, spec: JobSpec) -> str | None:
        """The member that owns job `name` as `spec` describes it (labels, kind, command,
        env; a function job's spec hash)."""
        if spec.kind == "function":
            return self.owner(name, spec.labels, function=(name, spec.definition_hash))
        return self.owner(name, spec.labels, spec.command[0], spec.env.keys())

    def owner(
        self,
        job: str,
        labels: Mapping[str, str] = _EMPTY,
        program: str | None = None,
        env_names: Iterable[str] = (),
        function: tuple[str, str] | None = None,
        apps_only: bool = False,
    ) -> str | None:
        """The member id that owns `job`, or None when no live member is eligible.
        `apps_only`: among app members only (a name that is no job, for `Cluster.is_owner`:
        a daemon would never act on it).

        `program` is the job's argv[0] and `env_names` the variables its env sets: members
        whose allow-list refuses them are not eligible.
        None leaves allow-lists out (only for asking who would own it by labels alone).
        """
        env = frozenset(env_names) if program is not None else frozenset()
        if not self._any_allow_list and program is not None:
            env = frozenset()  # nobody restricts commands: one memo entry per job; with app
            # members about, "" still asks for a daemon, whatever the program
            program = "" if self._any_app else None
        key = (job, frozenset(labels.items()), program, env, function, apps_only)
        try:
            return self._memo[key]
        except KeyError:
            pass
        candidates: Sequence[Member] = (
            self._members
            if not labels and program is None and function is None
            else [m for m in self._members if m.eligible_for(labels, program, env, function)]
        )
        if apps_only:
            candidates = [m for m in candidates if m.functions is not None]
        best: str | None = None
        best_weight = -1
        for member in candidates:
            w = weight(job, member.member_id)
            # Members are sorted by id, so `>=` lets the larger id win an exact tie.
            if w >= best_weight:
                best, best_weight = member.member_id, w
        self._memo[key] = best
        return best

    def assign(self, jobs: Mapping[str, Mapping[str, str]]) -> dict[str, str | None]:
        """Owner of each job in `jobs` (job name -> required labels)."""
        return {name: self.owner(name, labels) for name, labels in jobs.items()}

    def owned_by(self, member_id: str, jobs: Mapping[str, Mapping[str, str]]) -> list[str]:
        return [name for name, labels in jobs.items() if self.owner(name, labels) == member_id]


class MemberRecordError(ValueError):
    """A member znode whose data is not a valid member record."""


def member_from_record(znode: str, data: object) -> Member:
    """Build a Member from a decoded member record; MemberRecordError says what is wrong."""
    if not isinstance(data, dict):
        raise MemberRecordError("member record is not a JSON object")
    member_id = data.get("member_id")
    if not isinstance(member_id, str) or not member_id:
        raise MemberRecordError("member record has no member_id")
    problem = name_problem(member_id, "member id")
    if problem is not None:
        raise MemberRecordError(problem)
    named, _, tail = znode.rpartition(".")  # a member's znode is `<member_id>.<sequence>`
    if sequence_of(znode) < 0 or len(tail) != 10:
        raise MemberRecordError(f"member znode {znode!r} does not end in a sequence number")
    if member_id != named:
        raise MemberRecordError(
            f"member record says member_id {member_id!r}, but its znode is named for {named!r}"
        )
    labels = data.get("labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise MemberRecordError("member record labels are not a string-to-string table")
    allowed = data.get("allowed_commands")
    if allowed is not None and (
        not isinstance(allowed, list) or not all(isinstance(p, str) for p in allowed)
    ):
        raise MemberRecordError("member record allowed_commands is not a list of strings")
    functions = _functions_of(data.get("functions"))
    pid = data.get("pid", 0)
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < 2**32:
        raise MemberRecordError("member record pid is not a process id")
    host, started_at, version = (data.get(k, "") for k in ("host", "started_at", "version"))
    if not all(isinstance(v, str) for v in (host, started_at, version)):
        raise MemberRecordError("member record host/started_at/version are not strings")
    texts = [host, started_at, version, *labels.keys(), *labels.values(), *(allowed or ())]
    if any(len(t) > 4096 or not t.isprintable() for t in texts):
        raise MemberRecordError("member record has control characters or overlong text")
    assert isinstance(host, str) and isinstance(started_at, str) and isinstance(version, str)
    return Member(
        member_id=member_id,
        host=host,
        pid=pid,
        labels=labels,
        started_at=started_at,
        version=version,
        znode=znode,
        allowed_commands=tuple(allowed) if allowed is not None else None,
        functions=functions,
    )


def _functions_of(value: object) -> dict[str, str] | None:
    """An app member's function jobs (job name -> spec hash), checked like everything read."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_FUNCTIONS:
        raise MemberRecordError(
            f"member record functions is not a table of at most {MAX_FUNCTIONS:,} jobs"
        )
    for name, digest in value.items():
        if name_problem(name, "job name") is not None or not (
            isinstance(digest, str) and len(digest) == 16 and digest.isalnum()
        ):
            raise MemberRecordError("member record functions has a bad job name or spec hash")
    return value
