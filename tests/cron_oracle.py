"""A brute-force oracle for cron fire instants, independent of zksched's schedule code.

It shares nothing with zksched.core: fields are expanded by plain set arithmetic (croniter is
no help here: it turns `5-5` into `*` and `1-1/3` into `*/3`), time zones are read through
zoneinfo one instant at a time, and fires are found by walking real time second by second
(6 fields) or minute by minute (5 fields) and looking at the wall clock:

* a wall-clock time that matches fires at that instant, except that a fixed-time job fires only
  at the first occurrence of a repeated wall-clock time (zoneinfo's fold=0 reading of the wall
  time must be this very instant);
* when the wall clock jumps forward past matching times, a fixed-time job fires at the jump.

Slow on purpose: it is the definition, written as plainly as possible.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

# The macros as Vixie cron's crontab(5) defines them.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


@dataclass(frozen=True)
class OracleCron:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    dom_star: bool
    dow_star: bool
    fixed: bool
    has_seconds: bool
    dom_forms: frozenset[str] = frozenset()  # L, LW, NW
    dow_forms: frozenset[tuple[int, str]] = frozenset()  # (weekday, "L") or (weekday, "#K")

    def matches(self, wall: datetime) -> bool:
        if (
            wall.second not in self.seconds
            or wall.minute not in self.minutes
            or wall.hour not in self.hours
            or wall.month not in self.months
        ):
            return False
        return self.day_matches(wall)

    def day_matches(self, wall: datetime) -> bool:
        dom_hit = wall.day in self.doms or any(_dom_form(f, wall) for f in self.dom_forms)
        dow_hit = wall.isoweekday() % 7 in self.dows or any(
            wall.isoweekday() % 7 == weekday and _dow_form(form, wall)
            for weekday, form in self.dow_forms
        )
        if self.dom_star or self.dow_star:
            return dom_hit and dow_hit
        return dom_hit or dow_hit


def _dom_form(form: str, wall: datetime) -> bool:
    """Day-of-month L, LW, NW, by looking at the calendar: is `wall`'s day that day?"""
    last = calendar.monthrange(wall.year, wall.month)[1]
    if form == "L":
        return wall.day == last
    target = last if form == "LW" else int(form[:-1])
    if target > last:
        return False
    # the weekday nearest to `target` that is still in the month
    candidates = [d for d in range(1, last + 1) if calendar.weekday(wall.year, wall.month, d) < 5]
    nearest = min(candidates, key=lambda d: (abs(d - target), d))
    if calendar.weekday(wall.year, wall.month, target) < 5:
        nearest = target
    return wall.day == nearest


def _dow_form(form: str, wall: datetime) -> bool:
    """Day-of-week NL (no such weekday later in the month) or N#K (the K-th of the month)."""
    if form == "L":
        return wall.day + 7 > calendar.monthrange(wall.year, wall.month)[1]
    return (wall.day - 1) // 7 + 1 == int(form[1:])


def _split_forms(text: str, dom: bool) -> tuple[str, frozenset[Any]]:
    """The field without its month-dependent forms, and the forms."""
    plain: list[str] = []
    forms: set[Any] = set()
    for part in text.split(","):
        upper = part.upper()
        if dom and (upper in ("L", "LW") or (upper.endswith("W") and upper[:-1].isdigit())):
            forms.add(upper)
        elif not dom and (upper.endswith("L") or "#" in upper):
            day = upper[:-1] if upper.endswith("L") else upper.split("#")[0]
            number = _DAY_NAMES.index(day.lower()) if day.lower() in _DAY_NAMES else int(day)
            forms.add((number % 7, "L" if upper.endswith("L") else "#" + upper.split("#")[1]))
        else:
            plain.append(part)
    return ",".join(plain), frozenset(forms)


def expand_field(text: str, low: int, high: int, names: list[str] | None = None) -> frozenset[int]:
    """The values a (valid) cron field stands for. Plain set arithmetic, no cleverness."""

    def number(token: str) -> int:
        if names is not None and token.lower() in names:
            return names.index(token.lower()) + (1 if names is _MONTH_NAMES else 0)
        return int(token)

    values: set[int] = set()
    for part in text.split(",") if text else []:
        base, slash, step_text = part.partition("/")
        step = int(step_text) if slash else 1
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first_text, last_text = base.split("-")
            first, last = number(first_text), number(last_text)
            if names is _DAY_NAMES and last_text.lower() == "sun":
                last = 7  # `fri-sun`
        else:
            first = number(base)
            last = high if slash else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


def oracle_cron(expr: str) -> OracleCron:
    raw = MACROS.get(expr.strip().lower(), expr).split()
    if len(raw) == 5:
        raw = ["0", *raw]
    second, minute, hour, dom, month, dow = raw
    dom_plain, dom_forms = _split_forms(dom, dom=True)
    dow_plain, dow_forms = _split_forms(dow, dom=False)
    return OracleCron(
        seconds=expand_field(second, 0, 59),
        minutes=expand_field(minute, 0, 59),
        hours=expand_field(hour, 0, 23),
        doms=expand_field(dom_plain, 1, 31),
        months=expand_field(month, 1, 12, _MONTH_NAMES),
        # 0-7 with 7 = Sunday, as in Vixie cron
        dows=frozenset(d % 7 for d in expand_field(dow_plain, 0, 7, _DAY_NAMES)),
        dom_star=dom.startswith("*"),
        dow_star=dow.startswith("*"),
        fixed=not (minute.startswith("*") or hour.startswith("*")),
        has_seconds=len(expr.split()) == 6,
        dom_forms=dom_forms,
        dow_forms=dow_forms,
    )


def _wall(instant: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(instant, zone).replace(tzinfo=None)


def oracle_fires(cron: OracleCron, zone: ZoneInfo, start: int, end: int) -> list[int]:
    """Fire instants (epoch seconds) in (start, end], by walking real time step by step."""
    step = 1 if cron.has_seconds else 60
    fires: list[int] = []
    instant = (start // step + 1) * step
    previous_wall = _wall(instant - step, zone)
    one_step = timedelta(seconds=step)
    while instant <= end:
        wall = _wall(instant, zone)
        fire = False
        if cron.fixed:
            skipped = previous_wall + one_step
            while skipped < wall:  # the wall clock jumped over these
                if cron.matches(skipped):
                    fire = True
                    break
                skipped += one_step
        if not fire and cron.matches(wall):
            if cron.fixed:
                first = int(wall.replace(tzinfo=zone, fold=0).timestamp())
                fire = first == instant
            else:
                fire = True
        if fire:
            fires.append(instant)
        previous_wall = wall
        instant += step
    return fires


def offset_changes(zone: ZoneInfo, first_year: int, last_year: int) -> list[int]:
    """Instants (epoch seconds) where the zone's UTC offset changes, found by plain scanning."""
    start = int(datetime(first_year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(last_year, 1, 1, tzinfo=UTC).timestamp())
    changes: list[int] = []

    def offset(instant: int) -> timedelta | None:
        return datetime.fromtimestamp(instant, zone).utcoffset()

    previous = offset(start)
    probe = start
    while probe < end:
        following = probe + 6 * 3600
        current = offset(following)
        if current != previous:
            low, high = probe, following
            while high - low > 1:
                middle = (low + high) // 2
                if offset(middle) == previous:
                    low = middle
                else:
                    high = middle
            changes.append(high)
        previous = current
        probe = following
    return changes
