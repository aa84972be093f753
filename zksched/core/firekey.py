"""Fire keys: `<job>@<UTC instant>`, e.g. `nightly-backup@2026-01-02T02:00:00Z`.

A fire key names one scheduled instant of one job. It is the same on every host whatever its
local time zone (the instant is always written in UTC, to the second, with `Z`), so it serves as
the claim's identity in ZooKeeper and as an idempotency key for the job's own side effects.
The textual form is strict: one instant has exactly one spelling.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import mmh3

from zksched.core.names import name_problem

_UTC_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")
# Instants outside these years are no fire's: arithmetic on year 1 or 9999 overflows a
# datetime (a stray `0001-01-01T00:00:00Z` record stopped its job's planning).
FIRST_YEAR, LAST_YEAR = 1970, 8999


FireId = tuple[str, datetime]  # (job, scheduled instant): a fire key, unformatted


def _require_aware(instant: datetime, what: str = "instant") -> None:
    if not isinstance(instant, datetime):
        raise ValueError(f"{what} must be a datetime, not {type(instant).__name__}")
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{what} must be time-zone aware, got naive {instant.isoformat()}")


def format_utc(instant: datetime) -> str:
    """`instant` in UTC to the second (sub-second parts dropped): `2026-01-02T02:00:00Z`."""
    _require_aware(instant)
    u = instant.astimezone(UTC)
    # Explicit zero padding: strftime("%Y") does not pad years before 1000 on every libc.
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def parse_utc(text: str) -> datetime:
    """Inverse of format_utc: only the canonical form is accepted (ValueError otherwise)."""
    if not isinstance(text, str):
        raise ValueError(f"a UTC instant must be a string, not {type(text).__name__}")
    match = _UTC_RE.fullmatch(text)
    if match is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"{shown!r} is not a UTC instant like 2026-01-02T02:00:00Z")
    year, month, day, hour, minute, second = (int(g) for g in match.groups())
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise ValueError(f"{text!r} is outside the years {FIRST_YEAR}-{LAST_YEAR}")
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid UTC instant: {exc}") from None


def is_instant(text: object) -> bool:
    """Whether `text` is an instant as `format_utc` writes it (a fire record's node name)."""
    try:
        parse_utc(text)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


def fire_key(job: str, instant: datetime) -> str:
    """The fire key of `job` at `instant` (aware, any zone)."""
    problem = name_problem(job, "job name")
    if problem is not None:
        raise ValueError(problem)
    return f"{job}@{format_utc(instant)}"


def parse_fire_key(key: str) -> tuple[str, datetime]:
    """(job, aware UTC instant) from a fire key; ValueError if it is not one."""
    if not isinstance(key, str) or "@" not in key:
        raise ValueError(f"{key!r:.60} is not a fire key like job@2026-01-02T02:00:00Z")
    job, _, instant = key.rpartition("@")
    problem = name_problem(job, "job name")
    if problem is not None:
        raise ValueError(f"bad fire key: {problem}")
    return job, parse_utc(instant)


def jitter_of(key: str, jitter: float) -> float:
    """A deterministic delay in [0, jitter) per fire key: the same on every host."""
    if jitter <= 0:
        return 0.0
    return jitter * (mmh3.hash(key.encode(), 7, False) / 2**32)
