"""One-off jobs: a job that fires once, at an instant (`at = "2026-12-24T18:00:00+01:00"`).

Its schedule is stored as `@at <UTC instant>` (`@at 2026-12-24T17:00:00Z`), so that it goes
through the same job table, fire path, catch-up and history as any cron job: the instant is
claimed once, run by the job's owner, and caught up within `catchup_window` if no member was
up at the time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from zksched.core.durations import format_duration_ms
from zksched.core.firekey import FIRST_YEAR, LAST_YEAR, format_utc
from zksched.core.schedule import Schedule
from zksched.core.tomltext import toml_kind
from zksched.core.zones import ZoneOffsets, load_zone

if TYPE_CHECKING:
    from zksched.core.jobspec import JobSpec

AT_PREFIX = "@at "
# a fire record is named by its instant: the years such names may have (core/firekey.py)
_FIRST_YEAR, _LAST_YEAR = FIRST_YEAR + 1, LAST_YEAR


class AtError(ValueError):
    """Not an instant a one-off job can fire at; the message says why."""


def is_at(text: str) -> bool:
    """Whether a schedule text is a one-off's (`@at ...`)."""
    return text.strip()[:4].lower() == AT_PREFIX


def parse_at(value: object) -> datetime:
    """An aware instant from ISO 8601 text with an offset (or `Z`), or a TOML date-time
    with one; whole seconds, UTC."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        text = value.strip()
        if text.lower().startswith(AT_PREFIX.strip()):
            text = text[3:].strip()
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise AtError(
                f"{value[:60]!r} is not an ISO 8601 time such as 2026-12-24T18:00:00+01:00"
            ) from None
    else:
        raise AtError(f"the time must be a string or a date-time, not {toml_kind(value)}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise AtError(
            f"{when.isoformat()} has no UTC offset: write one (2026-12-24T18:00:00+01:00, or Z "
            "for UTC), so that every host reads the same instant"
        )
    if when.microsecond:
        raise AtError(f"{when.isoformat()} has a fraction of a second; fires are whole seconds")
    try:
        utc = when.astimezone(UTC)  # OverflowError past year 1 or 9999 in UTC
    except OverflowError:
        utc = None
    if utc is None or not _FIRST_YEAR <= utc.year <= _LAST_YEAR:
        raise AtError(f"{when.isoformat()} is out of range ({_FIRST_YEAR} to {_LAST_YEAR})")
    return utc


def at_schedule(value: object) -> str:
    """The stored schedule text of a one-off job: `@at <UTC instant>`."""
    return AT_PREFIX + format_utc(parse_at(value))


class OneOffSchedule(Schedule):
    """A schedule that fires once, at `at` (epoch seconds): every query of `Schedule` works
    on it (next fire, fires between, latest fire), so the fire path needs nothing else."""

    __slots__ = ("_at",)

    _at: int

    def __init__(self, at: int, timezone: str, offsets: ZoneOffsets) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "_at", at)
        setattr_(self, "_timezone", timezone)
        setattr_(self, "_offsets", offsets)
        setattr_(self, "_fixed", False)

    @property
    def expr(self) -> str:
        return AT_PREFIX + format_utc(datetime.fromtimestamp(self._at, UTC))

    @property
    def has_seconds(self) -> bool:
        return True

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self._at, UTC)

    def explain(self) -> list[str]:
        local = self.at.astimezone(load_zone(self._timezone))
        return [f"once, at {local.isoformat()} ({self._timezone})"]

    def _next(self, after: int, limit: int) -> int | None:
        return self._at if after < self._at <= limit else None


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
