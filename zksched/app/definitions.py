"""A decorated function's job: its options checked by the job files' own validator.

`Cluster.cron(...)` passes its options here; they become a job record (the form job files
and the job table share) and go through `JobSpec.from_record`, so a function job accepts
and refuses exactly what a job file does, and an error names the function and the option.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from zksched.core.durations import format_duration_ms
from zksched.core.jobspec import JobSpec, JobSpecError

# the decorator's option -> the record's key (where they differ)
_RECORD_KEY = {"tz": "timezone"}
_OPTION_OF = {record: option for option, record in _RECORD_KEY.items()}
DURATION_OPTIONS = ("timeout", "jitter", "catchup_window", "retry_backoff")


class JobDefinitionError(ValueError):
    """A function job's definition is invalid; nothing was registered. The message names the
    function and every option that is wrong."""


def function_job_spec(
    function: Callable[..., Any], name: str | None, schedule: object, options: Mapping[str, Any]
) -> JobSpec:
    """The job spec of `function` run on `schedule` with the decorator's `options` (tz,
    timeout, jitter, overlap, catchup, catchup_window, retries, retry_backoff, delivery,
    labels, history, paused); JobDefinitionError naming the function and the options."""
    where = _function_name(function)
    job = name if name is not None else getattr(function, "__name__", None)
    record: dict[str, Any] = {"format": 1, "name": job, "schedule": schedule, "kind": "function"}
    problems: list[str] = []
    for option, value in options.items():
        if option in ("command", "env", "workdir", "kind", "format", "name", "schedule"):
            problems.append(f"{option}: not an option of a function job")
            continue
        if option in DURATION_OPTIONS:
            try:
                value = _duration(value)
            except ValueError as exc:
                problems.append(f"{option}: {exc}")
                continue
        record[_RECORD_KEY.get(option, option)] = value
    if problems:
        raise JobDefinitionError(f"{where}: " + "; ".join(problems) + "; nothing was registered")
    try:
        return JobSpec.from_record(record)
    except JobSpecError as exc:
        said = []
        for problem in exc.problems:
            shown = _OPTION_OF.get(problem.field or "", problem.field)
            said.append(f"{shown}: {problem.message}" if shown else problem.message)
        raise JobDefinitionError(
            f"{where} (job {job!r}): " + "; ".join(said) + "; nothing was registered"
        ) from None


def _duration(value: object) -> object:
    """A duration option as the record's text: "90s" as is, seconds (int or float) and
    timedeltas converted; anything else is left for the validator to refuse."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be zero or more seconds, got {value!r}")
    return format_duration_ms(round(value * 1000))


def _function_name(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None) or "?"
    qualname = getattr(function, "__qualname__", None) or repr(function)
    return f"function {module}.{qualname}"
