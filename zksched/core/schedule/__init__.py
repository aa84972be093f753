"""Schedule math: when a job fires, as UTC instants.

What the rest of zksched uses: `Schedule` (a cron expression or a one-off `@at` in an IANA
zone; `Schedule.parse`), `next_fires`, `ScheduleError`; the one-off text (`at.py`: `AtError`,
`is_at`, `at_schedule`); the catch-up planning (`catchup.py`); cron syntax (`cron.py`) and
zones (`zones.py`) for validation. Module order, lowest first: dayforms → cron, zones →
instants → at → schedule → upcoming, catchup; no module imports one above it.
"""

from zksched.core.schedule.at import AtError, at_schedule, is_at, parse_at
from zksched.core.schedule.cron import CronSyntaxError, parse_cron
from zksched.core.schedule.instants import ScheduleError
from zksched.core.schedule.schedule import OneOffSchedule, Schedule
from zksched.core.schedule.upcoming import next_fires
from zksched.core.schedule.zones import UnknownZoneError, load_zone

__all__ = [
    "AtError",
    "CronSyntaxError",
    "OneOffSchedule",
    "Schedule",
    "ScheduleError",
    "UnknownZoneError",
    "at_schedule",
    "is_at",
    "load_zone",
    "next_fires",
    "parse_at",
    "parse_cron",
]
