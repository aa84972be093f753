"""Schedule math: when does a cron expression fire, in a time zone, as UTC instants.

Semantics (the SPEC's "Time" section, Vixie cron/cronie; details in docs/schedules.md):

* Fields are matched against the wall-clock time of the job's zone.
* Fixed-time jobs (neither minute nor hour starts with `*`): a matching wall-clock time that a
  forward jump skips fires once, at the jump; a matching wall-clock time that a backward jump
  repeats fires once, at its first occurrence.
* Other jobs fire at every real instant whose wall-clock time matches (a repeated hour fires
  twice, a skipped one not at all).
* Day of month / day of week: if either field starts with `*`, a day must match both;
  otherwise a day matching either fires.

Fires are whole seconds. The computation walks constant-offset stretches of UTC time (see
zones.py) and, inside each, jumps straight to the next matching wall-clock time with per-field
lookup tables: no minute-by-minute stepping, so a next fire costs a few microseconds whatever
the schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import cast

from zksched.core.firekey import format_utc
from zksched.core.schedule.at import AT_PREFIX, AtError, is_at, parse_at
from zksched.core.schedule.cron import CronFields, CronSyntaxError, parse_cron
from zksched.core.schedule.instants import (
    DAY,
    EPOCH_ORDINAL,
    NO_LIMIT,
    ScheduleError,
    checked,
    days_in_month,
    epoch_seconds,
    from_epoch,
    next_table,
)
from zksched.core.schedule.zones import (
    MAX_INSTANT,
    MAX_OFFSET_CHANGE,
    UnknownZoneError,
    ZoneOffsets,
    load_zone,
    zone_offsets,
)


class Schedule:
    """A cron expression in an IANA time zone. Immutable; build it with Schedule.parse."""

    __slots__ = (
        "_all_days",
        "_and_rule",
        "_days",
        "_fields",
        "_first_minute",
        "_first_month",
        "_first_second",
        "_fixed",
        "_hours_next",
        "_last_latest",
        "_last_next",
        "_minutes_next",
        "_months",
        "_months_next",
        "_offsets",
        "_seconds_next",
        "_timezone",
        "_weekdays",
    )

    _fields: CronFields
    _timezone: str
    _offsets: ZoneOffsets
    _fixed: bool
    _seconds_next: tuple[int, ...]
    _minutes_next: tuple[int, ...]
    _hours_next: tuple[int, ...]
    _months_next: tuple[int, ...]
    _first_second: int
    _first_minute: int
    _first_month: int
    _days: int
    _weekdays: int
    _months: int
    _and_rule: bool
    _all_days: bool
    # Each query's last answer by its arguments: a takeover asks it for every job of the
    # schedule (a million daily jobs share 1,440). Swapped whole: threads share schedules.
    _last_next: tuple[int | None, int | None]
    _last_latest: tuple[tuple[int, int] | None, int | None]

    def __init__(self, fields: CronFields, timezone: str, offsets: ZoneOffsets) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "_fields", fields)
        setattr_(self, "_timezone", timezone)
        setattr_(self, "_offsets", offsets)
        setattr_(self, "_fixed", fields.fixed_time)
        setattr_(self, "_last_next", (None, None))
        setattr_(self, "_last_latest", (None, None))
        setattr_(self, "_seconds_next", next_table(fields.seconds, 60))
        setattr_(self, "_minutes_next", next_table(fields.minutes, 60))
        setattr_(self, "_hours_next", next_table(fields.hours, 24))
        setattr_(self, "_months_next", next_table(fields.months, 13))
        setattr_(self, "_first_second", next_table(fields.seconds, 60)[0])
        setattr_(self, "_first_minute", next_table(fields.minutes, 60)[0])
        setattr_(self, "_first_month", next_table(fields.months, 13)[1])
        setattr_(self, "_days", fields.days)
        setattr_(self, "_weekdays", fields.weekdays)
        setattr_(self, "_months", fields.months)
        and_rule = fields.dom_star or fields.dow_star
        setattr_(self, "_and_rule", and_rule)
        all_dom = fields.days == 0xFFFFFFFE  # bits 1..31
        all_dow = fields.weekdays == 0x7F  # bits 0..6
        all_months = fields.months == 0x1FFE  # bits 1..12
        days_free = (all_dom and all_dow) if and_rule else (all_dom or all_dow)
        setattr_(self, "_all_days", all_months and days_free)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Schedule is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Schedule is immutable")

    # -- construction -------------------------------------------------------------------

    @staticmethod
    def parse(expr: str, timezone: str = "UTC") -> Schedule:
        """Parse a 5-field, 6-field (seconds first) or macro expression in an IANA zone.

        Raises ScheduleError with a message fit for an operator. Results are cached: equal
        arguments give the same (immutable) object.
        """
        return _parse_cached(expr, timezone)

    @property
    def expr(self) -> str:
        """The expression, whitespace normalised (single spaces; macros lower case)."""
        return self._fields.text

    @property
    def timezone(self) -> str:
        return self._timezone

    @property
    def fields(self) -> CronFields:
        return self._fields

    def explain(self) -> list[str]:
        """What its month-dependent day forms mean, one line each (none: no line)."""
        forms = self._fields.forms
        return forms.explain() if forms is not None else []

    @property
    def fixed_time(self) -> bool:
        """True when neither minute nor hour starts with `*` (DST: fire once, see module doc)."""
        return self._fixed

    @property
    def has_seconds(self) -> bool:
        return self._fields.has_seconds

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.expr, self._timezone) == (other.expr, other._timezone)

    def __hash__(self) -> int:
        return hash((self.expr, self._timezone))

    def __repr__(self) -> str:
        return f"Schedule({self.expr!r}, timezone={self._timezone!r})"

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (Schedule.parse, (self.expr, self._timezone))

    # -- public queries -----------------------------------------------------------------

    def next_fire(self, after: datetime) -> datetime:
        """The first fire instant strictly after `after` (aware), as an aware UTC datetime.

        ScheduleError if there is none before the end of year 9998.
        """
        start = checked(epoch_seconds(after, "after"))
        found = self._remembered("_last_next", start, lambda: self._next(start, MAX_INSTANT))
        if found is None:
            raise ScheduleError(f"{self.expr!r} does not fire again before the year 9999")
        return from_epoch(found)

    def fires_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Fire instants in (start, end], ascending, as aware UTC datetimes."""
        low = checked(epoch_seconds(start, "start"))
        high = min(epoch_seconds(end, "end"), MAX_INSTANT)
        return self._iterate(low, high)

    def latest_fire(self, start: datetime, end: datetime) -> datetime | None:
        """The newest fire instant in (start, end], or None.

        Costs O(log(end - start)) next-fire computations, not one per instant: an exponential
        search back from `end` followed by a bisection.
        """
        low = checked(epoch_seconds(start, "start"))
        high = min(epoch_seconds(end, "end"), MAX_INSTANT)
        found = self._remembered("_last_latest", (low, high), lambda: self._latest(low, high))
        return None if found is None else from_epoch(found)

    def _remembered(self, slot: str, key: object, compute: Callable[[], int | None]) -> int | None:
        last = getattr(self, slot)
        if last[0] == key:
            return cast("int | None", last[1])
        found = compute()
        object.__setattr__(self, slot, (key, found))
        return found

    # -- the math, on integer epoch seconds ---------------------------------------------

    def _iterate(self, low: int, high: int) -> Iterator[datetime]:
        current = self._next(low, high)
        while current is not None:
            yield from_epoch(current)
            current = self._next(current, high)

    def _latest(self, low: int, high: int) -> int | None:
        if self._next(low, high) is None:
            return None
        # has_fire(x) = "a fire in (x, high]" is true for x = low and falls to false at the
        # latest fire L; the largest x with has_fire(x) is L - 1.
        distance = 1
        yes, no = low, high
        while True:
            probe = high - distance
            if probe <= low:
                break
            if self._next(probe, high) is not None:
                yes = probe
                break
            no = probe
            distance *= 2
        while no - yes > 1:
            middle = (yes + no) // 2
            if self._next(middle, high) is not None:
                yes = middle
            else:
                no = middle
        return self._next(yes, high)

    def _next(self, after: int, limit: int) -> int | None:
        """The first fire in (after, limit], or None."""
        instant = after + 1
        if instant > limit:
            return None
        offsets = self._offsets
        fixed = self._fixed
        repeat_limit = NO_LIMIT
        if fixed:
            change = offsets.last_change(instant, MAX_OFFSET_CHANGE)
            if change is not None:
                at, before, now = change
                if now < before:
                    # Wall-clock times below at + before were already shown before `at`.
                    repeat_limit = at + before
                elif at == instant and now > before and self._has_wall(at + before, at + now):
                    return instant
        while instant <= limit:
            offset, end, change_at_end = offsets.piece(instant)
            low_wall = instant + offset
            if low_wall < repeat_limit:
                low_wall = repeat_limit
            wall = self._next_wall(low_wall, min(end, limit + 1) + offset)
            if wall is not None:
                return wall - offset
            instant = end
            if change_at_end is not None and fixed and instant <= limit:
                before, now = change_at_end
                if now > before:
                    # A forward jump: skipped matching wall-clock times fire at the jump.
                    if self._has_wall(instant + before, instant + now):
                        return instant
                else:
                    repeat_limit = instant + before
        return None

    def _has_wall(self, low: int, limit: int) -> bool:
        return self._next_wall(low, limit) is not None

    def _next_wall(self, low: int, limit: int) -> int | None:
        """The first matching wall-clock second in [low, limit), or None.

        Wall-clock seconds count from 1970-01-01T00:00 local, as epoch seconds do for UTC.
        """
        if low >= limit:
            return None
        day, second_of_day = divmod(low, DAY)
        limit_day = (limit - 1) // DAY + 1
        while True:
            if not self._all_days:
                matching_day = self._next_day(day, limit_day)
                if matching_day is None:
                    return None
                if matching_day != day:
                    day, second_of_day = matching_day, 0
            time_of_day = self._next_time_of_day(second_of_day)
            if time_of_day is not None:
                wall = day * DAY + time_of_day
                return wall if wall < limit else None
            day += 1
            second_of_day = 0
            if day >= limit_day:
                return None

    def _next_time_of_day(self, second_of_day: int) -> int | None:
        hour, rest = divmod(second_of_day, 3600)
        minute, second = divmod(rest, 60)
        hours, minutes, seconds = self._hours_next, self._minutes_next, self._seconds_next
        next_hour = hours[hour]
        if next_hour != hour:
            if next_hour == 24:
                return None
            return next_hour * 3600 + self._first_minute * 60 + self._first_second
        next_minute = minutes[minute]
        if next_minute == minute:
            next_second = seconds[second]
            if next_second != 60:
                return second_of_day - second + next_second
            next_minute = minutes[minute + 1]  # no second left in this minute
        if next_minute != 60:
            return hour * 3600 + next_minute * 60 + self._first_second
        next_hour = hours[hour + 1]  # no minute left in this hour
        if next_hour == 24:
            return None
        return next_hour * 3600 + self._first_minute * 60 + self._first_second

    def _next_day(self, day: int, limit_day: int) -> int | None:
        """The first matching day number (days since 1970-01-01) in [day, limit_day)."""
        when = date.fromordinal(day + EPOCH_ORDINAL)
        year, month, day_of_month = when.year, when.month, when.day
        months, months_next = self._months, self._months_next
        days, weekdays, and_rule = self._days, self._weekdays, self._and_rule
        forms = self._fields.forms
        while True:
            if not months >> month & 1:
                following = months_next[month]
                if following == 13:
                    year += 1
                    month = self._first_month
                else:
                    month = following
                day_of_month = 1
                continue
            if year > 9999:
                return None
            first = date(year, month, 1).toordinal() - EPOCH_ORDINAL
            if first + day_of_month - 1 >= limit_day:
                return None
            weekday_of_first = (first + 4) % 7  # 1970-01-01 was a Thursday; Sunday is 0
            length = days_in_month(year, month)
            dom_days = dow_days = 0
            if forms is not None:  # L, LW, NW, NL, N#K: this month's days
                dom_days = days | forms.dom_days(weekday_of_first, length)
                dow_days = forms.dow_days(weekday_of_first, length)
            else:
                dom_days = days
            for candidate in range(day_of_month, length + 1):
                dom_hit = dom_days >> candidate & 1
                dow_hit = weekdays >> ((weekday_of_first + candidate - 1) % 7) & 1 or (
                    dow_days >> candidate & 1
                )
                if (dom_hit and dow_hit) if and_rule else (dom_hit or dow_hit):
                    found = first + candidate - 1
                    return found if found < limit_day else None
            month += 1
            day_of_month = 1
            if month == 13:
                month = 1
                year += 1


@lru_cache(maxsize=16384)
def _parse_cached(expr: str, timezone: str) -> Schedule:
    at: int | None = None
    try:
        if is_at(expr):
            at = int(parse_at(expr).timestamp())
            fields = None
        else:
            fields = parse_cron(expr)
    except (CronSyntaxError, AtError) as exc:
        raise ScheduleError(str(exc)) from None
    try:
        offsets = zone_offsets(timezone)
    except UnknownZoneError as exc:
        raise ScheduleError(str(exc)) from None
    if fields is None:
        assert at is not None
        return OneOffSchedule(at, timezone, offsets)
    return Schedule(fields, timezone, offsets)


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
        setattr_(self, "_last_next", (None, None))
        setattr_(self, "_last_latest", (None, None))

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
