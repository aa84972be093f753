"""Job specs: the TOML job file, validation, and the canonical record stored in ZooKeeper.

A JobSpec is immutable and always valid: its constructor checks every field, so a spec built
from a file, from a stored record or directly in code obeys the same rules. Parsing a file
collects every problem (job, field, line where known) instead of stopping at the first.

The canonical record (`JobSpec.to_record`) holds every key, durations as canonical text
("1h", "90s", "500ms"), and `"format": 1`; `canonical_json` is its sorted, compact UTF-8 JSON
and `content_hash` the start of its SHA-256, so equal specs hash equally on every host.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, cast

from zksched.core.cronexpr import CronSyntaxError, parse_cron
from zksched.core.durations import format_duration_ms, parse_duration_ms
from zksched.core.names import name_problem, parse_label
from zksched.core.schedule import Schedule, ScheduleError
from zksched.core.zones import UnknownZoneError, load_zone

FORMAT = 1
MAX_FILE_BYTES = 16 * 1024 * 1024
# One job's canonical record; ZooKeeper's default node limit is 1 MiB, and records may share
# a node, so a single job stays far below it.
MAX_RECORD_BYTES = 256 * 1024
MAX_ARGS = 1024
MAX_ARG_CHARS = 65_536
MAX_ENV = 256
MAX_LABELS = 64
MAX_WORKDIR_CHARS = 4096
MAX_JITTER_MS = 86_400_000  # 1d
MAX_CATCHUP_WINDOW_MS = 366 * 86_400_000
MIN_HISTORY, MAX_HISTORY = 1, 1000

Overlap = Literal["skip", "allow"]
Catchup = Literal["latest", "all", "none"]
OVERLAP_POLICIES: tuple[Overlap, ...] = ("skip", "allow")
CATCHUP_POLICIES: tuple[Catchup, ...] = ("latest", "all", "none")

# Every key a job (or [defaults]) may set, in the order problems are reported.
JOB_KEYS = (
    "schedule",
    "command",
    "timezone",
    "timeout",
    "jitter",
    "overlap",
    "catchup",
    "catchup_window",
    "labels",
    "env",
    "history",
    "paused",
    "workdir",
)
REQUIRED_KEYS = ("schedule", "command")
RECORD_KEYS = ("format", "name", *JOB_KEYS)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_TOML_ERROR_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


# -- problems ----------------------------------------------------------------------------------


def _show(text: str, limit: int = 60) -> str:
    """A user string for a one-line message: quoted, escaped, shortened."""
    shown = repr(text[:limit])
    return shown if len(text) <= limit else shown[:-1] + "...'"


def _kind(value: object) -> str:
    """The TOML name of a value's type (never its repr: values may be huge or deeply nested)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, datetime):
        return "a date-time"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, time):
        return "a time"
    if value is None:
        return "null"
    return type(value).__name__


@dataclass
class SpecProblem:
    """One thing wrong with a job file or record: which job, which field, why, where."""

    job: str | None
    field: str | None
    message: str
    line: int | None = None
    source: str | None = None

    def __str__(self) -> str:
        if self.source is not None:
            where = f"{self.source}:{self.line}: " if self.line else f"{self.source}: "
        else:
            where = f"line {self.line}: " if self.line else ""
        parts = []
        if self.job is not None:
            parts.append(f"job {_show(self.job)}")
        if self.field is not None:
            parts.append(f"field {_show(self.field)}")
        subject = ", ".join(parts)
        return f"{where}{subject}: {self.message}" if subject else f"{where}{self.message}"


class JobSpecError(ValueError):
    """A job file or record is invalid; `.problems` lists every problem found."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = problems
        if len(problems) == 1:
            text = str(problems[0])
        else:
            text = f"{len(problems)} problems: " + "; ".join(str(p) for p in problems)
        super().__init__(text)


class _Bad(Exception):
    """A value is wrong; the message says why (without naming the job or field)."""


# -- immutable string maps ---------------------------------------------------------------------


class FrozenMap(Mapping[str, str]):
    """A read-only, hashable str -> str mapping, iterated in sorted key order."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        items = data.items() if isinstance(data, Mapping) else data
        self._data: dict[str, str] = dict(sorted(items))
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[object, tuple[dict[str, str]]]:
        return (FrozenMap, (self._data,))


_EMPTY = FrozenMap()


# -- value checks, one per key; each turns a file/record value into the spec's value ------------


def _string(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} must be a string, not {_kind(value)}")
    if len(value) > limit:
        raise _Bad(f"{what} is {len(value)} characters long; the limit is {limit}")
    if "\x00" in value:
        raise _Bad(f"{what} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad(f"{what} is not valid Unicode (a lone surrogate)") from None
    return value


def _check_schedule(value: object) -> str:
    text = _string(value, "the schedule", 1024)
    try:
        return parse_cron(text).text
    except CronSyntaxError as exc:
        raise _Bad(str(exc)) from None


def _check_timezone(value: object) -> str:
    name = _string(value, "the time zone", 128)
    try:
        load_zone(name)
    except UnknownZoneError as exc:
        raise _Bad(f'{exc} (use an IANA name such as "Europe/Berlin" or "UTC")') from None
    return name


def _check_command(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise _Bad(
            'the command must be an array of strings (argv, no shell), e.g. ["/usr/bin/backup", '
            '"--full"]; for a shell line use ["/bin/sh", "-c", "..."]'
        )
    if not isinstance(value, list | tuple):
        raise _Bad(f"the command must be an array of strings, not {_kind(value)}")
    if not value:
        raise _Bad("the command must not be empty")
    if len(value) > MAX_ARGS:
        raise _Bad(f"the command has {len(value)} arguments; the limit is {MAX_ARGS}")
    argv = tuple(_string(arg, f"argument {i}", MAX_ARG_CHARS) for i, arg in enumerate(value))
    if argv[0] == "":
        raise _Bad("the command's program (its first element) must not be empty")
    return argv


def _millis(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str):
        raise _Bad(f'{what} must be a duration string such as "30s", not {_kind(value)}')
    try:
        return parse_duration_ms(value)
    except ValueError as exc:
        raise _Bad(str(exc)) from None


def _check_timeout(value: object) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    millis = _millis(value, "the timeout")
    if millis <= 0:
        raise _Bad('the timeout must be positive (leave it out, or write "none", for no limit)')
    return millis / 1000


def _check_jitter(value: object) -> float:
    millis = _millis(value, "the jitter")
    if millis > MAX_JITTER_MS:
        raise _Bad(f"the jitter is {format_duration_ms(millis)}; the limit is 1d")
    return millis / 1000


def _check_catchup_window(value: object) -> float:
    millis = _millis(value, "the catch-up window")
    if millis > MAX_CATCHUP_WINDOW_MS:
        raise _Bad(f"the catch-up window is {format_duration_ms(millis)}; the limit is 366d")
    return millis / 1000


def _choice(value: object, what: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        shown = _show(value) if isinstance(value, str) else _kind(value)
        raise _Bad(f"{what} must be one of {', '.join(choices)}; got {shown}")
    return value


def _check_overlap(value: object) -> Overlap:
    return cast(Overlap, _choice(value, "overlap", OVERLAP_POLICIES))


def _check_catchup(value: object) -> Catchup:
    return cast(Catchup, _choice(value, "catchup", CATCHUP_POLICIES))


def _table(value: object, what: str, limit: int) -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise _Bad(
            f'{what} must be a table of strings, e.g. {{ KEY = "value" }}, not {_kind(value)}'
        )
    if len(value) > limit:
        raise _Bad(f"{what} has {len(value)} entries; the limit is {limit}")
    return value


def _entries(
    value: object, what: str, limit: int, check: Callable[[object, object], str]
) -> FrozenMap:
    """Check every entry of a labels/env table, reporting all bad entries at once."""
    good: dict[str, str] = {}
    bad: list[str] = []
    for key, item in _table(value, what, limit).items():
        try:
            good[cast(str, key)] = check(key, item)
        except _Bad as exc:
            bad.append(str(exc))
    if bad:
        raise _Bad("; ".join(bad))
    return FrozenMap(good)


def _label_entry(key: object, item: object) -> str:
    problem = name_problem(key, "label key")
    if problem is not None:
        raise _Bad(problem)
    text = _string(item, f"label {_show(cast(str, key))}", 256)
    try:
        parse_label(f"{key}={text}")  # the rule members' --label values follow
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    return text


def _env_entry(key: object, item: object) -> str:
    if not isinstance(key, str) or not (key.isascii() and _ENV_NAME.fullmatch(key)):
        shown = _show(key) if isinstance(key, str) else _kind(key)
        raise _Bad(
            f"environment variable name {shown} is not allowed: use letters, digits and "
            "'_', not starting with a digit"
        )
    if key.upper().startswith("ZKSCHED_"):
        raise _Bad(f"environment variable {key} is reserved: zksched sets ZKSCHED_* itself")
    return _string(item, f"the value of {key}", MAX_ARG_CHARS)


def _check_labels(value: object) -> FrozenMap:
    return _entries(value, "labels", MAX_LABELS, _label_entry)


def _check_env(value: object) -> FrozenMap:
    return _entries(value, "env", MAX_ENV, _env_entry)


def _check_history(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"history must be an integer, not {_kind(value)}")
    if not MIN_HISTORY <= value <= MAX_HISTORY:
        shown = str(value) if abs(value) < 10**12 else "a huge number"
        raise _Bad(f"history must be between {MIN_HISTORY} and {MAX_HISTORY}, got {shown}")
    return value


def _check_paused(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"paused must be true or false, not {_kind(value)}")
    return value


def _check_workdir(value: object) -> str | None:
    if value is None:
        return None
    path = _string(value, "workdir", MAX_WORKDIR_CHARS)
    if not path.startswith("/"):
        raise _Bad(f"workdir must be an absolute path, got {_show(path)}")
    return path


_CHECKS: dict[str, Callable[[object], Any]] = {
    "schedule": _check_schedule,
    "command": _check_command,
    "timezone": _check_timezone,
    "timeout": _check_timeout,
    "jitter": _check_jitter,
    "overlap": _check_overlap,
    "catchup": _check_catchup,
    "catchup_window": _check_catchup_window,
    "labels": _check_labels,
    "env": _check_env,
    "history": _check_history,
    "paused": _check_paused,
    "workdir": _check_workdir,
}


def _unknown_key(key: object, known: Iterable[str]) -> str:
    if not isinstance(key, str):
        return "unknown key"
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; known keys: {', '.join(known)}"


# -- the spec ----------------------------------------------------------------------------------


def _seconds_to_millis(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"{what} must be a number of seconds, not {_kind(value)}")
    if not abs(value) <= 10**12:  # also catches NaN and infinities
        raise _Bad(f"{what} is out of range")
    return round(value * 1000)


@dataclass(frozen=True)
class JobSpec:
    """One job, validated. Durations are float seconds (millisecond precision)."""

    name: str
    schedule: str
    command: tuple[str, ...]
    timezone: str = "UTC"
    timeout: float | None = None  # None: no limit
    jitter: float = 0.0
    overlap: Overlap = "skip"
    catchup: Catchup = "latest"
    catchup_window: float = 3600.0
    labels: Mapping[str, str] = field(default=_EMPTY)
    env: Mapping[str, str] = field(default=_EMPTY)
    history: int = 20
    paused: bool = False
    workdir: str | None = None  # absolute; None: the daemon's working directory

    def __post_init__(self) -> None:
        job = self.name if isinstance(self.name, str) else None
        problems: list[SpecProblem] = []

        def normalise(key: str, check: Callable[[object], Any], value: object) -> None:
            try:
                object.__setattr__(self, key, check(value))
            except _Bad as exc:
                problems.append(SpecProblem(job, key, str(exc)))

        # Durations arrive as seconds here; round them to the millisecond and reuse the
        # text checks so that the bounds are the file's bounds.
        for key, check in (
            ("timeout", _check_timeout),
            ("jitter", _check_jitter),
            ("catchup_window", _check_catchup_window),
        ):
            value = getattr(self, key)
            if value is None and key == "timeout":
                continue
            try:
                millis = _seconds_to_millis(value, key)
                if millis < 0:
                    raise _Bad(f"{key} must not be negative")
                normalise(key, check, format_duration_ms(millis))
            except _Bad as exc:
                problems.append(SpecProblem(job, key, str(exc)))
        for key in JOB_KEYS:
            if key not in ("timeout", "jitter", "catchup_window"):
                normalise(key, _CHECKS[key], getattr(self, key))
        problems[:0] = self._whole_problems(fields_ok=not problems)
        if problems:
            raise JobSpecError(problems)

    @classmethod
    def _from_checked(cls, name: object, values: Mapping[str, object]) -> JobSpec:
        """A spec from values that already passed _CHECKS: skips checking them twice."""
        spec = object.__new__(cls)
        for spec_field in dataclasses.fields(cls):
            default = values.get(spec_field.name, spec_field.default)
            object.__setattr__(spec, spec_field.name, default)
        object.__setattr__(spec, "name", name)
        problems = spec._whole_problems(fields_ok=True)
        if problems:
            raise JobSpecError(problems)
        return spec

    def _whole_problems(self, fields_ok: bool) -> list[SpecProblem]:
        """The name, and (when every field is fine) what depends on several fields."""
        job = self.name if isinstance(self.name, str) else None
        name_issue = name_problem(self.name, "job name")
        if name_issue is not None:
            return [SpecProblem(job, "name", name_issue)]
        if not fields_ok:
            return []
        try:
            Schedule.parse(self.schedule, self.timezone)
        except ScheduleError as exc:  # pragma: no cover - both parts were checked alone
            return [SpecProblem(job, "schedule", str(exc))]
        # JSON text is at most 6 bytes per character (\u0000 escapes): only a spec that
        # might be too big pays for serialising it here.
        if _rough_chars(self) * 6 + 4096 > MAX_RECORD_BYTES:
            size = len(canonical_json(self))
            if size > MAX_RECORD_BYTES:
                return [
                    SpecProblem(
                        job,
                        None,
                        f"the job is {size} bytes as a record; the limit is {MAX_RECORD_BYTES}",
                    )
                ]
        return []

    @cached_property
    def schedule_obj(self) -> Schedule:
        """The parsed schedule in the job's time zone."""
        return Schedule.parse(self.schedule, self.timezone)

    @cached_property
    def content_hash(self) -> str:
        """First 16 hex digits of the SHA-256 of canonical_json(self)."""
        return hashlib.sha256(canonical_json(self)).hexdigest()[:16]

    def to_record(self) -> dict[str, Any]:
        """The canonical JSON-able form (plain dicts, lists, strings, ints, bools, null)."""
        return {
            "format": FORMAT,
            "name": self.name,
            "schedule": self.schedule,
            "command": list(self.command),
            "timezone": self.timezone,
            "timeout": None if self.timeout is None else _duration_text(self.timeout),
            "jitter": _duration_text(self.jitter),
            "overlap": self.overlap,
            "catchup": self.catchup,
            "catchup_window": _duration_text(self.catchup_window),
            "labels": dict(self.labels),
            "env": dict(self.env),
            "history": self.history,
            "paused": self.paused,
            "workdir": self.workdir,
        }

    @classmethod
    def from_record(cls, data: object) -> JobSpec:
        """A spec from a stored record (a dict, or its JSON text); JobSpecError if invalid.

        Checked exactly like a job file; keys other than format, name, schedule and command
        may be missing (their defaults apply), unknown keys are errors.
        """
        if isinstance(data, bytes | bytearray | str):
            try:
                data = json.loads(data)
            except (ValueError, RecursionError) as exc:
                message = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
                raise JobSpecError(
                    [SpecProblem(None, None, f"the record is not JSON: {message[:200]}")]
                ) from None
        if not isinstance(data, Mapping):
            raise JobSpecError(
                [SpecProblem(None, None, f"a job record must be an object, not {_kind(data)}")]
            )
        name = data.get("name")
        job = name if isinstance(name, str) else None
        problems: list[SpecProblem] = []
        version = data.get("format")
        if not (type(version) is int and version == FORMAT):
            problems.append(
                SpecProblem(
                    job, "format", f"unsupported record format; this zksched reads format {FORMAT}"
                )
            )
        if name is None:
            problems.append(SpecProblem(None, "name", "missing"))
        raw = {k: v for k, v in data.items() if k not in ("format", "name")}
        values = _check_job_table(raw, job, problems, lambda *_: None)
        if problems or values is None:
            raise JobSpecError(problems)
        return _build(cast(str, name), values, job, problems, lambda *_: None)


def _rough_chars(spec: JobSpec) -> int:
    """The number of characters in a spec's strings (what its record size grows with)."""
    return (
        len(spec.name)
        + len(spec.schedule)
        + len(spec.timezone)
        + len(spec.workdir or "")
        + sum(len(arg) + 3 for arg in spec.command)
        + sum(len(k) + len(v) + 6 for k, v in spec.labels.items())
        + sum(len(k) + len(v) + 6 for k, v in spec.env.items())
    )


def _duration_text(seconds: float) -> str:
    return format_duration_ms(round(seconds * 1000))


def canonical_json(spec: JobSpec) -> bytes:
    """The record as sorted, compact UTF-8 JSON: the bytes stored and hashed."""
    return json.dumps(
        spec.to_record(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


# -- job files ---------------------------------------------------------------------------------


_LineOf = Callable[..., int | None]  # (*path) -> the line of that table or key


def _check_job_table(
    raw: Mapping[object, object],
    job: str | None,
    problems: list[SpecProblem],
    line_of: _LineOf,
    where: tuple[str, ...] = (),
    prefix: str = "",
) -> dict[str, object] | None:
    """Check each key of a job (or [defaults]) table; the good values, or None if any is bad."""
    values: dict[str, object] = {}
    bad = False
    for key, value in raw.items():
        if key not in _CHECKS:
            shown_key = key if isinstance(key, str) else "?"
            problems.append(
                SpecProblem(
                    job,
                    prefix + shown_key,
                    _unknown_key(key, JOB_KEYS),
                    line_of(*where, shown_key),
                )
            )
            bad = True
            continue
        try:
            values[key] = _CHECKS[key](value)
        except _Bad as exc:
            problems.append(SpecProblem(job, prefix + key, str(exc), line_of(*where, key)))
            bad = True
    return None if bad else values


def _missing(present: Iterable[object], job: str | None, line: int | None) -> list[SpecProblem]:
    """A problem for each required key not in `present`."""
    keys = set(present)
    hints = {
        "schedule": 'every job needs one, e.g. schedule = "0 2 * * *"',
        "command": 'every job needs one: an argv array, e.g. command = ["/usr/bin/backup"]',
    }
    return [
        SpecProblem(job, key, f"missing: {hints[key]}", line)
        for key in REQUIRED_KEYS
        if key not in keys
    ]


def _build(
    name: str,
    values: Mapping[str, object],
    job: str | None,
    problems: list[SpecProblem],
    line_of: _LineOf,
    where: tuple[str, ...] = (),
) -> JobSpec:
    missing = _missing(values, job, line_of(*where))
    if missing:
        raise JobSpecError(problems + missing)
    try:
        return JobSpec._from_checked(name, values)
    except JobSpecError as exc:
        for problem in exc.problems:
            problem.line = problem.line or line_of(*where, problem.field or "")
        problems.extend(exc.problems)
        raise JobSpecError(problems) from None


class _Lines:
    """Best-effort line numbers of tables and keys (tomllib reports none after a parse).

    Recognises `[a.b]` headers and `key =` / `a.b =` lines, skipping multi-line strings.
    Used only to point at problems, so a miss just means a message without a line.
    """

    _KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
    _PATH = re.compile(rf"\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*")
    _PART = re.compile(_KEY)

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        in_string: str | None = None
        for number, line in enumerate(text.splitlines()[:1_000_000], start=1):
            if in_string is not None:
                if line.count(in_string) % 2 == 1:
                    in_string = None
                continue
            stripped = line.strip()
            if stripped.startswith("["):
                inner = stripped.lstrip("[")
                match = self._PATH.match(inner)
                if match is not None and inner[match.end() :].startswith("]"):
                    table = self._path(match.group(1))
                    self._lines.setdefault(table, number)
                continue
            match = self._PATH.match(line)
            if match is not None and line[match.end() :].startswith("="):
                self._lines.setdefault(table + self._path(match.group(1)), number)
                rest = line[match.end() + 1 :]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_string = quote

    def _path(self, text: str) -> tuple[str, ...]:
        parts = []
        for token in self._PART.findall(text):
            if token.startswith(('"', "'")):
                try:
                    token = tomllib.loads(f"k = {token}")["k"]
                except tomllib.TOMLDecodeError:
                    token = token[1:-1]
            parts.append(token)
        return tuple(parts)

    def __call__(self, *path: str) -> int | None:
        while path:
            found = self._lines.get(path)
            if found is not None:
                return found
            path = path[:-1]
        return None


def _decode(data: str | bytes, source: str) -> str:
    if isinstance(data, bytes | bytearray):
        if len(data) > MAX_FILE_BYTES:
            raise JobSpecError(
                [
                    SpecProblem(
                        None,
                        None,
                        f"the file is {len(data)} bytes; the limit is {MAX_FILE_BYTES}",
                        source=source,
                    )
                ]
            )
        try:
            return bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JobSpecError(
                [
                    SpecProblem(
                        None,
                        None,
                        f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                        source=source,
                    )
                ]
            ) from None
    if not isinstance(data, str):
        raise JobSpecError([SpecProblem(None, None, "a job file must be text", source=source)])
    if len(data) > MAX_FILE_BYTES // 4 and len(data.encode("utf-8", "surrogatepass")) > (
        MAX_FILE_BYTES
    ):
        raise JobSpecError(
            [
                SpecProblem(
                    None,
                    None,
                    f"the file is larger than the limit of {MAX_FILE_BYTES} bytes",
                    source=source,
                )
            ]
        )
    return data.removeprefix("\ufeff")


def parse_job_file(text: str | bytes, source: str = "<jobs>") -> dict[str, JobSpec]:
    """Every job of a TOML job file, in file order; JobSpecError listing all problems."""
    content = _decode(text, source)
    try:
        document = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_ERROR_AT.search(message)
        line: int | None = None
        if at:
            line = int(at.group(1))
            message = f"{message[: at.start()]} (column {at.group(2)})"
        elif message.endswith(" (at end of document)"):
            line = max(1, len(content.splitlines()))
            message = message.removesuffix(" (at end of document)") + " at the end of the file"
        raise JobSpecError(
            [SpecProblem(None, None, f"invalid TOML: {message}", line, source)]
        ) from None
    except RecursionError:
        raise JobSpecError(
            [SpecProblem(None, None, "invalid TOML: nested too deeply", source=source)]
        ) from None
    except ValueError as exc:  # e.g. an integer with thousands of digits
        raise JobSpecError(
            [SpecProblem(None, None, f"invalid TOML: {str(exc)[:120]}", source=source)]
        ) from None
    line_of = _Lines(content)
    problems: list[SpecProblem] = []
    jobs: dict[str, JobSpec] = {}

    for key in document:
        if key not in ("defaults", "jobs"):
            problems.append(
                SpecProblem(
                    None,
                    key,
                    "unknown top-level key: a job file has a [defaults] table and "
                    "[jobs.NAME] tables",
                    line_of(key),
                )
            )

    defaults_raw = document.get("defaults", {})
    defaults: dict[str, object] = {}
    broken_defaults: set[str] = set()
    if not isinstance(defaults_raw, dict):
        problems.append(
            SpecProblem(
                None, "defaults", f"must be a table, not {_kind(defaults_raw)}", line_of("defaults")
            )
        )
    else:
        for key, value in defaults_raw.items():
            checked = _check_job_table(
                {key: value}, None, problems, line_of, ("defaults",), "defaults."
            )
            if checked is None:
                broken_defaults.add(key)
            else:
                defaults.update(checked)

    table = document.get("jobs", {})
    if not isinstance(table, dict):
        hint = " (write [jobs.NAME] tables, not [[jobs]])" if isinstance(table, list) else ""
        problems.append(
            SpecProblem(
                None, "jobs", f"must be a table of jobs, not {_kind(table)}{hint}", line_of("jobs")
            )
        )
        table = {}
    for name, body in table.items():
        where = ("jobs", name)
        name_issue = name_problem(name, "job name")
        if name_issue is not None:
            problems.append(SpecProblem(name, None, name_issue, line_of(*where)))
        if not isinstance(body, dict):
            problems.append(
                SpecProblem(
                    name, None, f"a job must be a table, not {_kind(body)}", line_of(*where)
                )
            )
            continue
        own = _check_job_table(body, name, problems, line_of, where)
        missing = _missing([*body, *defaults, *broken_defaults], name, line_of(*where))
        problems.extend(missing)
        if own is None or name_issue is not None or missing:
            continue
        inherited = {k: v for k, v in defaults.items() if k not in own}
        if any(k in broken_defaults and k not in own for k in JOB_KEYS):
            continue  # the broken default is reported once, under [defaults]
        try:
            jobs[name] = _build(name, {**inherited, **own}, name, [], line_of, where)
        except JobSpecError as exc:
            problems.extend(exc.problems)
    if problems:
        for problem in problems:
            problem.source = source
        raise JobSpecError(problems)
    return jobs


def load_job_file(path: str | Path) -> dict[str, JobSpec]:
    """Read and parse a job file; JobSpecError (never OSError) if it cannot be read."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise JobSpecError(
            [SpecProblem(None, None, f"cannot read the file: {reason}", source=source)]
        ) from None
    except ValueError as exc:  # e.g. a path with a NUL in it
        raise JobSpecError(
            [SpecProblem(None, None, f"cannot read the file: {exc}", source=source)]
        ) from None
    return parse_job_file(data, source)
