"""Epoch-second arithmetic for schedule math: whole seconds, exact integers, the range."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

from zksched.core.schedule.zones import MIN_INSTANT


class ScheduleError(ValueError):
    """A schedule that cannot be used: bad expression, unknown zone, or no fire in range."""


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
DAY = 86_400
NO_LIMIT = -(1 << 62)  # "no repeated wall-clock time to skip"


def epoch_seconds(value: datetime, what: str) -> int:
    """An aware datetime as integer epoch seconds, rounded down (fires are whole seconds)."""
    if not isinstance(value, datetime):
        raise ValueError(f"{what} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be time-zone aware, got naive {value.isoformat()}")
    # Exact integer arithmetic: timestamp() is a float and can round .999999 up a second.
    return (value - EPOCH) // SECOND


def checked(instant: int) -> int:
    if instant < MIN_INSTANT - 1:
        raise ScheduleError(
            f"{from_epoch(instant).isoformat()} is before the supported range (year 2 onwards)"
        )
    return instant


def from_epoch(instant: int) -> datetime:
    return EPOCH + timedelta(seconds=instant)


@lru_cache(maxsize=4096)
def next_table(mask: int, size: int) -> tuple[int, ...]:
    """table[x] = smallest allowed value >= x, or `size` if none; table[size] = size."""
    table = [size] * (size + 1)
    following = size
    for value in range(size - 1, -1, -1):
        if mask >> value & 1:
            following = value
        table[value] = following
    return tuple(table)


def days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31
