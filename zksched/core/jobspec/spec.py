"""The job spec (a frozen dataclass, always valid) and its canonical record.

The canonical record (`JobSpec.to_record`) holds every key, durations as canonical text
("1h", "90s", "500ms"), and `"format": 1`; `canonical_json` is its sorted, compact UTF-8 JSON
and `content_hash` the start of its SHA-256, so equal specs hash equally on every host.
`JobSpec.from_record` checks a stored record exactly like a job file.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from zksched.core.durations import format_duration_ms
from zksched.core.jobspec.fields import (
    _CHECKS,
    JOB_KEYS,
    Catchup,
    Delivery,
    Kind,
    Overlap,
    _check_catchup_window,
    _check_jitter,
    _check_job_table,
    _check_retry_backoff,
    _check_timeout,
    _missing,
)
from zksched.core.jobspec.frozenmap import EMPTY_MAP
from zksched.core.jobspec.problems import JobSpecError, SpecProblem, _Bad, _LineOf
from zksched.core.names import name_problem
from zksched.core.schedule import Schedule, ScheduleError
from zksched.core.tomltext import toml_kind

FORMAT = 1
# One job's canonical record; ZooKeeper's default node limit is 1 MiB, and records may share
# a node, so a single job stays far below it.
MAX_RECORD_BYTES = 256 * 1024
RECORD_KEYS = ("format", "name", *JOB_KEYS)


def _seconds_to_millis(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"{what} must be a number of seconds, not {toml_kind(value)}")
    if not abs(value) <= 10**12:  # also catches NaN and infinities
        raise _Bad(f"{what} is out of range")
    return round(value * 1000)


_DURATION_KEYS = ("timeout", "jitter", "catchup_window", "retry_backoff")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job, validated. Durations are float seconds (millisecond precision). Slotted: a
    daemon holds one per job of the table (a million of them must fit a host)."""

    name: str
    schedule: str
    command: tuple[str, ...]
    timezone: str = "UTC"
    timeout: float | None = None  # None: no limit
    jitter: float = 0.0
    overlap: Overlap = "skip"
    catchup: Catchup = "latest"
    catchup_window: float = 3600.0
    retries: int = 0  # a failed or timed-out instant is run again up to this many times
    retry_backoff: float = 10.0  # before the first retry; doubled for each next one
    # at-least-once: an instant whose claimer's session died before its result is run again
    delivery: Delivery = "at-most-once"
    labels: Mapping[str, str] = field(default=EMPTY_MAP)
    env: Mapping[str, str] = field(default=EMPTY_MAP)
    history: int = 20
    paused: bool = False
    workdir: str | None = None  # absolute; None: the daemon's working directory
    # "function": a Python function registered by the apps that run it (no command, env,
    # workdir); only members that registered it, with this very spec, are given the job
    kind: Kind = "command"
    # computed once, when first asked (not part of the job: never compared or copied)
    _schedule: Schedule | None = field(default=None, init=False, repr=False, compare=False)
    _content_hash: str | None = field(default=None, init=False, repr=False, compare=False)

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
            ("retry_backoff", _check_retry_backoff),
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
            if key == "command" and self.kind == "function" and self.command == ():
                continue  # a function job has no command (checked with the others below)
            if key not in _DURATION_KEYS:
                normalise(key, _CHECKS[key], getattr(self, key))
        problems[:0] = self._whole_problems(fields_ok=not problems)
        if problems:
            raise JobSpecError(problems)

    @classmethod
    def _from_checked(cls, name: object, values: Mapping[str, object]) -> JobSpec:
        """A spec from values that already passed _CHECKS: skips checking them twice."""
        spec = object.__new__(cls)
        put, given = object.__setattr__, values.get
        for key, default in _field_defaults():
            put(spec, key, given(key, default))
        if "command" not in values:
            put(spec, "command", ())  # a function job's (_missing let only those)
        put(spec, "name", name)
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
        kind_problem = self._kind_problem()
        if kind_problem is not None:
            return [SpecProblem(job, kind_problem[0], kind_problem[1])]
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

    def _kind_problem(self) -> tuple[str, str] | None:
        """What a job of its kind may not have: (field, why)."""
        if self.kind == "command":
            if not self.command:
                return "command", "the command must not be empty"
            return None
        for key, unset in (("command", not self.command), ("env", not self.env)):
            if not unset:
                return (
                    key,
                    f"a function job has no {key}: it runs in the process that registered it",
                )
        if self.workdir is not None:
            return (
                "workdir",
                "a function job has no workdir: it runs in the process that registered it",
            )
        return None

    @property
    def schedule_obj(self) -> Schedule:
        """The parsed schedule in the job's time zone."""
        schedule = self._schedule
        if schedule is None:
            schedule = Schedule.parse(self.schedule, self.timezone)
            object.__setattr__(self, "_schedule", schedule)
        return schedule

    @property
    def content_hash(self) -> str:
        """First 16 hex digits of the SHA-256 of canonical_json(self)."""
        digest = self._content_hash
        if digest is None:
            digest = hashlib.sha256(canonical_json(self)).hexdigest()[:16]
            object.__setattr__(self, "_content_hash", digest)
        return digest

    @property
    def definition_hash(self) -> str:
        """`content_hash` with `paused` left out (as if not paused): what an app member
        advertises for a function job it registered, so that `zksched jobs pause` and
        `resume` do not change who may run the job."""
        unpaused = dataclasses.replace(self, paused=False) if self.paused else self
        return unpaused.content_hash

    def to_record(self) -> dict[str, Any]:
        """The canonical JSON-able form (plain dicts, lists, strings, ints, bools, null)."""
        record: dict[str, Any] = {
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
        if self.retries:
            # only when used: a job without retries keeps the record (and hash) it had, and
            # daemons that predate retries still read it
            record["retries"] = self.retries
            record["retry_backoff"] = _duration_text(self.retry_backoff)
        if self.delivery != "at-most-once":
            record["delivery"] = self.delivery  # likewise: only when asked for
        if self.kind != "command":
            record["kind"] = self.kind  # likewise (a daemon from before refuses the job)
            del record["command"]  # it has none
        return record

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
                [SpecProblem(None, None, f"a job record must be an object, not {toml_kind(data)}")]
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
        values = _check_job_table(data, job, problems, _no_line, passed_over=("format", "name"))
        if problems or values is None:
            raise JobSpecError(problems)
        return _build(cast(str, name), values, job, problems, _no_line)


@functools.cache
def _field_defaults() -> tuple[tuple[str, object], ...]:
    """JobSpec's fields and their defaults, looked up once (a daemon builds a million)."""
    return tuple((f.name, f.default) for f in dataclasses.fields(JobSpec))


def _rough_chars(spec: JobSpec) -> int:
    """The number of characters in a spec's strings (what its record size grows with)."""
    chars = (
        len(spec.name)
        + len(spec.schedule)
        + len(spec.timezone)
        + len(spec.workdir or "")
        + sum(map(len, spec.command))
        + 3 * len(spec.command)
    )
    for table in (spec.labels, spec.env):
        if table:
            chars += sum(map(len, table)) + sum(map(len, table.values())) + 6 * len(table)
    return chars


def _no_line(*_where: str) -> int | None:
    return None  # a stored record has no lines


def _duration_text(seconds: float) -> str:
    return format_duration_ms(round(seconds * 1000))


def canonical_json(spec: JobSpec) -> bytes:
    """The record as sorted, compact UTF-8 JSON: the bytes stored and hashed."""
    return json.dumps(
        spec.to_record(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


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
