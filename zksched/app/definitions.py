"""A decorated function's job: its options checked by the job files' own validator.

`Cluster.cron(...)` passes its options here; they become a job record (the form job files
and the job table share) and go through `JobSpec.from_record`, so a function job accepts
and refuses exactly what a job file does, and an error names the function and the option.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Literal, TypedDict

from zksched.core.durations import format_duration_ms
from zksched.core.jobspec import JobSpec, JobSpecError
from zksched.core.schedule.at import AtError, at_schedule

# the decorator's option -> the record's key (where they differ)
_RECORD_KEY = {"tz": "timezone"}
_OPTION_OF = {record: option for option, record in _RECORD_KEY.items()}
DURATION_OPTIONS = ("timeout", "jitter", "catchup_window", "retry_backoff")
Duration = str | int | float | timedelta  # "90s" text, seconds, or a timedelta


class JobOptions(TypedDict, total=False):
    """What `cron(schedule, at=, name=, **options)` takes as options: the job file's keys
    that a function job has (a job file's `timezone` is `tz`), typed for the caller's
    checker; the values are checked again when the job is defined, as a job file's are."""

    tz: str
    timeout: Duration | None
    jitter: Duration
    overlap: Literal["skip", "allow"]
    catchup: Literal["latest", "all", "none"]
    catchup_window: Duration
    retries: int
    retry_backoff: Duration
    delivery: Literal["at-most-once", "at-least-once"]
    labels: Mapping[str, str]
    history: int
    paused: bool


OPTIONS = tuple(JobOptions.__annotations__)
_NOT_FOR_FUNCTIONS = ("command", "env", "workdir", "kind")  # a job file's, for commands
_SCHEDULE_HINT = (
    'a cron schedule such as "0 2 * * *" or "@daily", or at= a time to run once such as '
    '"2026-12-24T18:00:00+01:00" or an aware datetime'
)
_DURATION_HINT = 'text such as "30s" or "1h30m", a number of seconds, or a timedelta'


class JobDefinitionError(ValueError):
    """A function job's definition is invalid; nothing was registered. The message names the
    function and every option that is wrong."""


def function_job_spec(
    function: Callable[..., Any],
    name: str | None,
    schedule: object,
    options: Mapping[str, Any],
    at: object = None,
) -> JobSpec:
    """The job spec of `function` run on `schedule` (or once, `at`) with the decorator's
    `options` (OPTIONS); JobDefinitionError naming the function, the job and every option
    that is wrong, with what it accepts."""
    where = _function_name(function)
    job = name if name is not None else getattr(function, "__name__", None)
    record: dict[str, Any] = {"format": 1, "name": job, "kind": "function"}
    said: dict[str, str] = {}  # option -> what is wrong with it
    if at is not None and schedule is not None:
        said["at"] = "a job has a schedule or an at (run once), not both"
    elif at is not None:
        try:
            record["schedule"] = at_schedule(at)
        except AtError as exc:
            said["at"] = f"{exc}; give ISO 8601 text with an offset or an aware datetime"
    elif schedule is None:
        said["schedule"] = f"missing: give {_SCHEDULE_HINT}"
    elif not isinstance(schedule, str):
        said["schedule"] = f"{_shown(schedule)} is not a schedule: give {_SCHEDULE_HINT}"
    else:
        record["schedule"] = schedule
    for option, value in options.items():
        problem = _option_problem(option, value)
        if problem is not None:
            said[option] = problem
            continue
        if option in DURATION_OPTIONS:
            value = _duration(value)
        record[_RECORD_KEY.get(option, option)] = value
    spec: JobSpec | None = None
    try:
        spec = JobSpec.from_record(record)
    except JobSpecError as exc:  # every problem, beside those said already
        for found in exc.problems:
            shown = _OPTION_OF.get(found.field or "", found.field) or ""
            if shown == "schedule" and "at" in said:
                continue  # the schedule was to come from `at`
            said.setdefault(shown, found.message)
    if spec is None or said:
        told = [f"{option}: {why}" if option else why for option, why in said.items()]
        raise JobDefinitionError(
            f"{where} (job {job!r}): " + "; ".join(told) + "; nothing was registered"
        )
    return spec


def _option_problem(option: str, value: object) -> str | None:
    """What is wrong with an option before the job files' validator sees it: names that are
    no option of cron(), and the values whose Python types a job file has no words for."""
    if option in _NOT_FOR_FUNCTIONS:
        return (
            "not an option of a function job (the function is what runs); its options: "
            + ", ".join(OPTIONS)
        )
    if option not in OPTIONS:
        close = difflib.get_close_matches(option, [*OPTIONS, "timezone"], n=1)
        guess = {"timezone": "tz"}.get(close[0], close[0]) if close else None
        hint = f" (did you mean {guess!r}?)" if guess else ""
        return f"not an option of cron(){hint}; its options: " + ", ".join(OPTIONS)
    if option in DURATION_OPTIONS:
        return _duration_problem(value)
    if option == "labels" and not isinstance(value, Mapping):
        return f'must be a dict of str to str such as {{"role": "web"}}, not {_shown(value)}'
    if option == "paused" and not isinstance(value, bool):
        return f"must be True or False, not {_shown(value)}"
    return None


def _duration_problem(value: object) -> str | None:
    """Why a duration option cannot be used, for values of another type than text or out
    of range as seconds (text goes to the validator, which says what is wrong with it)."""
    if value is None or isinstance(value, str):
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return f"{_shown(value)} is not a duration: give {_DURATION_HINT}"
    if not math.isfinite(seconds) or seconds < 0:
        return f"{_shown(value)} is not a duration: give zero or more seconds ({_DURATION_HINT})"
    return None


def _duration(value: object) -> object:
    """A duration option as the record's text: "90s" as is, seconds (int or float) and
    timedeltas converted (`_duration_problem` refused the rest)."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return format_duration_ms(round(value * 1000))


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _function_name(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None) or "?"
    qualname = getattr(function, "__qualname__", None) or repr(function)
    return f"function {module}.{qualname}"
