"""The daemon's config file (TOML): every key, its type and range, checked without I/O.

The file holds defaults for command-line options: top-level keys are the global options
(`zk`, `client_id`, `auth`, `tls*`, `connect_timeout`, `log_level`, `log_format`), and the
`[run]` table holds `zksched run`'s options. Flags beat environment variables beat the file;
the CLI feeds the checked values to click as its `default_map`, so that order is click's own.

Every problem is collected (key, message, TOML line where it can be found), never only the
first, so that `zksched config check` can name them all at once.
"""

from __future__ import annotations

import math
import tomllib
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zksched.core.durations import parse_duration
from zksched.core.names import name_problem, parse_label
from zksched.core.tomltext import TOML_ERROR_AT, TomlLines, toml_kind

DEFAULT_CONFIG_PATH = "/etc/zksched/zksched.toml"
MAX_CONFIG_BYTES = 1_000_000
MAX_PATTERN_LENGTH = 4096
MAX_PATTERNS = 1000

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
ON_SESSION_LOSS = ("terminate", "continue")


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config file: which key (dotted), why, and where."""

    key: str | None
    message: str
    line: int | None = None
    source: str = "<config>"

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}: " if self.line else f"{self.source}: "
        return f"{where}{self.key}: {self.message}" if self.key else f"{where}{self.message}"


class ConfigError(ValueError):
    def __init__(self, problems: list[ConfigProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class FileConfig:
    """A checked config file: option values ready for click (names as click's params)."""

    source: str
    options: dict[str, Any] = field(default_factory=dict)  # global options
    run: dict[str, Any] = field(default_factory=dict)  # `zksched run` options

    def default_map(self) -> dict[str, Any]:
        result = dict(self.options)
        if self.run:
            result["run"] = dict(self.run)
        return result


class _Bad(ValueError):
    """A value that does not fit its key; the message says why."""


# -- value checks: each returns the click-ready value or raises _Bad ----------------------------


def _string(value: object, what: str = "a string") -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be {what}, not {toml_kind(value)}")
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise _Bad("must not contain control characters")
    return value


def _nonempty(value: object) -> str:
    text = _string(value)
    if not text.strip():
        raise _Bad("must not be empty")
    return text


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false, not {toml_kind(value)}")
    return value


def _choice(*choices: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        text = _string(value)
        if text not in choices:
            raise _Bad(f"must be one of {', '.join(choices)}, not {text[:40]!r}")
        return text

    return check


def _seconds(low: float, high: float) -> Callable[[object], float]:
    """A number of seconds, or a duration string ("30s", "1m30s"), within [low, high]."""

    def check(value: object) -> float:
        if isinstance(value, bool):
            raise _Bad(
                f'must be a number of seconds or a duration such as "30s", not {toml_kind(value)}'
            )
        if isinstance(value, int | float):
            seconds = float(value)
            if not math.isfinite(seconds):
                raise _Bad("must be a finite number of seconds")
        elif isinstance(value, str):
            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                raise _Bad(str(exc)) from None
        else:
            raise _Bad(
                f'must be a number of seconds or a duration such as "30s", not {toml_kind(value)}'
            )
        if not low <= seconds <= high:
            raise _Bad(f"{seconds:g}s is out of range ({low:g}s to {high:g}s)")
        return seconds

    return check


def _integer(low: int, high: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"must be an integer, not {toml_kind(value)}")
        if not low <= value <= high:
            raise _Bad(f"{value} is out of range ({low} to {high})")
        return value

    return check


def _name(what: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        problem = name_problem(value, what)
        if problem:
            raise _Bad(problem)
        assert isinstance(value, str)
        return value

    return check


def _auth(value: object) -> str:
    text = _string(value)
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise _Bad('must be "USER:PASSWORD" (a digest credential)')
    return text


def _labels(value: object) -> list[str]:
    """A table of label key -> value; click's `--label` takes them as K=V strings."""
    if not isinstance(value, Mapping):
        raise _Bad(f'must be a table such as {{ role = "db" }}, not {toml_kind(value)}')
    result: list[str] = []
    for key, label in value.items():
        if not isinstance(label, str):
            raise _Bad(f"label {key!r} must be a string, not {toml_kind(label)}")
        try:
            parse_label(f"{key}={label}")
        except ValueError as exc:
            raise _Bad(str(exc)) from None
        result.append(f"{key}={label}")
    return result


def _http(value: object) -> str:
    """A listen address `host:port` (or `:port`); "" turns the HTTP endpoint off."""
    text = _string(value)
    if text == "":
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Bad(
            f'must be a listen address such as "127.0.0.1:9180" (or "" for off), not {text[:60]!r}'
        )
    if host.startswith("[") != host.endswith("]"):
        raise _Bad(f"has an unbalanced IPv6 bracket: {text[:60]!r}")
    return text


def _patterns(value: object) -> list[str]:
    """The command allow-list: fnmatch patterns on a job's argv[0]."""
    if not isinstance(value, list):
        raise _Bad(
            f'must be an array of patterns such as ["/usr/local/bin/*"], not {toml_kind(value)}'
        )
    if not value:
        raise _Bad("is empty, which would refuse every job; remove the key to allow every command")
    if len(value) > MAX_PATTERNS:
        raise _Bad(f"has {len(value)} patterns; the limit is {MAX_PATTERNS}")
    result: list[str] = []
    for index, pattern in enumerate(value):
        if not isinstance(pattern, str):
            raise _Bad(f"pattern #{index + 1} must be a string, not {toml_kind(pattern)}")
        if not pattern.strip():
            raise _Bad(f"pattern #{index + 1} is empty")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise _Bad(f"pattern #{index + 1} is longer than {MAX_PATTERN_LENGTH} characters")
        if any(unicodedata.category(c) == "Cc" for c in pattern):
            raise _Bad(f"pattern #{index + 1} contains control characters")
        problem = pattern_problem(pattern)
        if problem is not None:
            raise _Bad(f"pattern #{index + 1}: {problem}")
        result.append(pattern)
    return result


def pattern_problem(pattern: str) -> str | None:
    """Why an allow-list pattern is refused: it must be an absolute path (a bare name would
    match whatever a PATH finds first, a relative one whatever a job's workdir holds)."""
    if not pattern.startswith("/"):
        hint = f"/usr/bin/{pattern}" if "/" not in pattern else "/usr/local/bin/*"
        return (
            f"{pattern!r} is not an absolute path: patterns match the program's full path "
            f"(e.g. {hint!r})"
        )
    return None


_Check = Callable[[object], Any]

# key in the file -> (click parameter name, check). Keys are written with underscores;
# dashes (the flags' spelling) are accepted too.
GLOBAL_KEYS: dict[str, tuple[str, _Check]] = {
    "zk": ("zk", _nonempty),
    "client_id": ("client_id", _name("client_id")),
    "auth": ("auth", _auth),
    "tls": ("tls", _bool),
    "tls_ca": ("tls_ca", _nonempty),
    "tls_cert": ("tls_cert", _nonempty),
    "tls_key": ("tls_key", _nonempty),
    "tls_check_hostname": ("tls_check_hostname", _bool),
    "connect_timeout": ("connect_timeout", _seconds(0.1, 600)),
    "log_level": ("log_level", _choice(*LOG_LEVELS)),
    "log_format": ("log_format", _choice(*LOG_FORMATS)),
}
RUN_KEYS: dict[str, tuple[str, _Check]] = {
    "labels": ("labels", _labels),
    "session_timeout": ("session_timeout", _seconds(1, 600)),
    "member_id": ("member_id", _name("member_id")),
    "concurrency": ("concurrency", _integer(1, 4096)),
    "on_session_loss": ("on_session_loss", _choice(*ON_SESSION_LOSS)),
    "stop_grace": ("stop_grace", _seconds(0, 86_400)),
    "http": ("http", _http),
    "allowed_commands": ("allowed_commands", _patterns),
}


def _check_table(
    table: Mapping[str, Any],
    keys: Mapping[str, tuple[str, _Check]],
    prefix: str,
    problems: list[ConfigProblem],
    line_of: Callable[..., int | None],
    source: str,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        where = line_of(*prefix.split(".")[:-1], raw_key) if prefix else line_of(raw_key)
        dotted = f"{prefix}{raw_key}"
        spec = keys.get(key)
        if spec is None:
            known = ", ".join(sorted(keys))
            problems.append(
                ConfigProblem(dotted, f"unknown key (known keys: {known})", where, source)
            )
            continue
        if key in seen:
            problems.append(
                ConfigProblem(dotted, f"given twice (also as {seen[key]!r})", where, source)
            )
            continue
        seen[key] = raw_key
        param, check = spec
        try:
            result[param] = check(value)
        except _Bad as exc:
            problems.append(ConfigProblem(dotted, str(exc), where, source))
    return result


def _cross_checks(config: FileConfig, problems: list[ConfigProblem], line_of: Any) -> None:
    options = config.options
    if ("tls_cert" in options) != ("tls_key" in options):
        key = "tls_cert" if "tls_cert" in options else "tls_key"
        problems.append(
            ConfigProblem(
                key,
                "tls_cert and tls_key go together: give both or neither",
                line_of(key),
                config.source,
            )
        )
    if not options.get("tls", False):
        for key in ("tls_ca", "tls_cert", "tls_key"):
            if key in options:
                problems.append(
                    ConfigProblem(
                        key,
                        "is set but tls is not true: it would be ignored",
                        line_of(key),
                        config.source,
                    )
                )


def parse_config(
    text: str | bytes,
    source: str = "<config>",
    check_connect_string: Callable[[str], object] | None = None,
) -> FileConfig:
    """Check a config file's content; ConfigError listing every problem.

    `check_connect_string` (raising ValueError) lets the caller add the ZooKeeper layer's
    connect-string rules without this pure module depending on that layer.
    """
    if isinstance(text, bytes | bytearray):
        if len(text) > MAX_CONFIG_BYTES:
            raise ConfigError(
                [
                    ConfigProblem(
                        None, f"the file is larger than {MAX_CONFIG_BYTES} bytes", None, source
                    )
                ]
            )
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                [ConfigProblem(None, f"not UTF-8 text (byte {exc.start})", None, source)]
            ) from None
    text = text.removeprefix("\ufeff")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = TOML_ERROR_AT.search(message)
        line = int(at.group(1)) if at else None
        if at:
            message = f"{message[: at.start()]} (column {at.group(2)})"
        elif message.endswith(" (at end of document)"):
            line = max(1, len(text.splitlines()))
            message = message.removesuffix(" (at end of document)") + " at the end of the file"
        raise ConfigError([ConfigProblem(None, f"invalid TOML: {message}", line, source)]) from None
    except (RecursionError, ValueError) as exc:
        raise ConfigError(
            [ConfigProblem(None, f"invalid TOML: {str(exc)[:120]}", None, source)]
        ) from None
    line_of = TomlLines(text)
    problems: list[ConfigProblem] = []
    top = {k: v for k, v in document.items() if k != "run"}
    options = _check_table(top, GLOBAL_KEYS, "", problems, line_of, source)
    run: dict[str, Any] = {}
    if "run" in document:
        table = document["run"]
        if isinstance(table, Mapping):
            run = _check_table(table, RUN_KEYS, "run.", problems, line_of, source)
        else:
            problems.append(
                ConfigProblem(
                    "run",
                    f"must be a table ([run]), not {toml_kind(table)}",
                    line_of("run"),
                    source,
                )
            )
    config = FileConfig(source, options, run)
    _cross_checks(config, problems, line_of)
    if check_connect_string is not None and "zk" in options:
        try:
            check_connect_string(options["zk"])
        except ValueError as exc:
            problems.append(ConfigProblem("zk", str(exc), line_of("zk"), source))
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: (p.line or 0, p.key or "")))
    return config
