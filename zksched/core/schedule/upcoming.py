"""The next few fire instants of a schedule (`zksched next`, `jobs list`)."""

from __future__ import annotations

from datetime import datetime

from zksched.core.schedule.instants import checked, epoch_seconds, from_epoch
from zksched.core.schedule.schedule import Schedule
from zksched.core.schedule.zones import MAX_INSTANT


def next_fires(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire instants strictly after `after` (fewer only near year 9999)."""
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    current = checked(epoch_seconds(after, "after"))
    result: list[datetime] = []
    while len(result) < count:
        found = schedule._next(current, MAX_INSTANT)  # the package's own helper
        if found is None:
            break
        result.append(from_epoch(found))
        current = found
    return result
