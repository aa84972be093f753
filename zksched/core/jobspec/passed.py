"""What becomes of a one-off job whose time has passed: a word for whoever declared it."""

from __future__ import annotations

from datetime import datetime

from zksched.core.durations import format_duration_ms
from zksched.core.firekey import format_utc
from zksched.core.jobspec.spec import JobSpec
from zksched.core.schedule import OneOffSchedule


def passed_note(spec: JobSpec, now: datetime) -> str | None:
    """What becomes of a one-off job whose time has passed, for a warning; None for any
    other job. Job files (`zksched check`, `jobs apply`) and the decorator accept such a
    job, since declarations outlive their instant (an app restarted after its one-off ran
    registers it again), and say this; `zksched jobs at`, which adds one now, refuses it."""
    schedule, catchup, window = spec.schedule_obj, spec.catchup, spec.catchup_window
    if not isinstance(schedule, OneOffSchedule) or schedule.at > now:
        return None
    late = (now - schedule.at).total_seconds()
    at = format_utc(schedule.at)
    shown = format_duration_ms(round(window * 1000))
    if catchup != "none" and late <= window:
        return (
            f"{at} has passed: it runs late, once, when a member takes it over, unless it "
            f"ran already (within its catchup_window, {shown})"
        )
    why = 'catchup = "none"' if catchup == "none" else f"beyond its catchup_window, {shown}"
    return (
        f"{at} has passed ({why}): it will not run, and its instant is recorded as "
        "skipped unless it ran already; give a time ahead, or remove the job once it is done"
    )
