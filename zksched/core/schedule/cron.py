"""Parsing cron expressions into field bitmasks, with Vixie cron's syntax and flags.

Own parser rather than croniter's: croniter expands `1-7` in day-of-week to `*` (losing the
"restricted" flag Vixie's day rule needs), wraps reversed ranges (`5-2`) around instead of
refusing them, accepts Quartz/Jenkins extensions (`L`, `W`, `#`, `?`, `H`) whose semantics we do
not implement, and puts the seconds field last where the SPEC puts it first.

Accepted syntax, per field: `*`, `N`, `A-B`, each optionally followed by `/STEP`, `N/STEP`
(meaning `N-MAX/STEP`), comma-separated lists of those; month names `jan`..`dec` and day
names `sun`..`sat` (any case); day-of-week 0-7 where both 0 and 7 are Sunday (so `sun` ending
a range, as in `fri-sun`, is 7). Five fields
(minute hour day-of-month month day-of-week) or six with seconds first. Macros: `@yearly`
(`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly`.

Day forms that depend on the month (as cronsim reads them; `NW` as Quartz), in list elements
of their own: day-of-month `L` (the last day), `LW` (the last weekday, Monday to Friday),
`NW` (the weekday nearest to day N, never in another month); day-of-week `NL` (the last
weekday N of the month) and `N#K` (the K-th, K from 1 to 5). They make their field
restricted like any value (Vixie's day rule below still decides how the two fields combine).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from zksched.core.schedule.dayforms import DayForms

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

MAX_EXPRESSION_LENGTH = 1024

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_DOW_NAMES = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
# Days in each month in a leap year: a day-of-month is possible in a month if it is <= this.
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_ELEMENT = re.compile(r"(?P<base>\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>[0-9]+))?")
_DOM_FORM = re.compile(r"(?i:(?P<lw>LW)|(?P<last>L)|(?P<near>[0-9]{1,2})W)")
_DOW_FORM = re.compile(r"(?i:(?P<day>[0-9]|[a-z]{3})(?:(?P<last>L)|#(?P<nth>[0-9])))")


class CronSyntaxError(ValueError):
    """The expression is not a valid cron expression; the message says where and why."""


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_SECOND = _FieldSpec("second", 0, 59)
_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DOM = _FieldSpec("day-of-month", 1, 31)
_MONTH = _FieldSpec("month", 1, 12, _MONTH_NAMES)
_DOW = _FieldSpec("day-of-week", 0, 7, _DOW_NAMES)


@dataclass(frozen=True)
class CronFields:
    """A parsed expression: one bitmask per field (bit N set = value N matches).

    `dom_star` / `dow_star` record whether the field's text starts with `*` (Vixie's
    DOM_STAR/DOW_STAR): when either is set a day must match both fields, otherwise either.
    `fixed_time` is true when neither minute nor hour starts with `*`: such jobs get the
    DST treatment of fixed-time jobs (see docs/schedules.md).
    """

    text: str
    seconds: int
    minutes: int
    hours: int
    days: int
    months: int
    weekdays: int
    dom_star: bool
    dow_star: bool
    fixed_time: bool
    has_seconds: bool
    forms: DayForms | None = None  # L, LW, NW, NL, N#K (None: none of them)


def _show(text: str) -> str:
    shown = text if len(text) <= 40 else text[:37] + "..."
    return repr(shown)


def _value(token: str, spec: _FieldSpec, field_text: str) -> int:
    if token.isdigit() and token.isascii():
        if len(token) > 4:
            raise CronSyntaxError(
                f"{spec.name} field {_show(field_text)}: {_show(token)} is out of range "
                f"{spec.low}-{spec.high}"
            )
        number = int(token)
    elif spec.names is not None and token.lower() in spec.names:
        number = spec.names[token.lower()]
    else:
        kind = "a number or a name" if spec.names is not None else "a number"
        raise CronSyntaxError(
            f"{spec.name} field {_show(field_text)}: {_show(token)} is not {kind}"
        )
    if not spec.low <= number <= spec.high:
        raise CronSyntaxError(
            f"{spec.name} field {_show(field_text)}: {number} is out of range "
            f"{spec.low}-{spec.high}"
        )
    return number


class _FormsFound:
    """The day forms met while parsing the two day fields."""

    def __init__(self) -> None:
        self.last = self.last_weekday = False
        self.nearest = self.last_of = 0
        self.nth: list[tuple[int, int]] = []

    @staticmethod
    def _no_step(pattern: re.Pattern[str], element: str, text: str, field: str) -> None:
        base, slash, _ = element.partition("/")
        if slash and pattern.fullmatch(base):
            raise CronSyntaxError(
                f"{field} field {_show(text)}: {_show(element)}: a step applies to numbers "
                "and ranges, not to L, W or #"
            )

    def dom(self, element: str, text: str) -> bool:
        self._no_step(_DOM_FORM, element, text, "day-of-month")
        if re.fullmatch(r"(?i:L-[0-9]+W?)", element):
            raise CronSyntaxError(
                f"day-of-month field {_show(text)}: {_show(element)} (days before the last) "
                "is not supported; use L or LW"
            )
        match = _DOM_FORM.fullmatch(element)
        if match is None:
            return False
        if match.group("lw"):
            self.last_weekday = True
        elif match.group("last"):
            self.last = True
        else:
            day = int(match.group("near"))
            if not 1 <= day <= 31:
                raise CronSyntaxError(
                    f"day-of-month field {_show(text)}: {_show(element)}: the day before W "
                    "must be 1-31"
                )
            self.nearest |= 1 << day
        return True

    def dow(self, element: str, text: str) -> bool:
        self._no_step(_DOW_FORM, element, text, "day-of-week")
        match = _DOW_FORM.fullmatch(element)
        if match is None:
            return False
        weekday = _value(match.group("day"), _DOW, text) % 7
        if match.group("last"):
            self.last_of |= 1 << weekday
            return True
        k = int(match.group("nth"))
        if not 1 <= k <= 5:
            raise CronSyntaxError(
                f"day-of-week field {_show(text)}: {_show(element)}: the number after # "
                "must be 1-5 (no month has a sixth such weekday)"
            )
        self.nth.append((weekday, k))
        return True

    def forms(self) -> DayForms | None:
        found = DayForms(
            self.last, self.last_weekday, self.nearest, self.last_of, tuple(sorted(set(self.nth)))
        )
        return None if found == DayForms() else found


_USE = {
    "day-of-month": "*, N, A-B, */S, A-B/S, N/S, L, LW or NW",
    "day-of-week": "*, N, A-B, */S, A-B/S, N/S, NL or N#K",
}


def _parse_field(
    text: str, spec: _FieldSpec, form: Callable[[str, str], bool] | None = None
) -> int:
    mask = 0
    for element in text.split(","):
        if element == "":
            raise CronSyntaxError(f"{spec.name} field {_show(text)}: empty list element")
        if form is not None and form(element, text):
            continue
        match = _ELEMENT.fullmatch(element)
        if match is None:
            use = _USE.get(spec.name, "*, N, A-B, */S, A-B/S or N/S")
            raise CronSyntaxError(
                f"{spec.name} field {_show(text)}: cannot read {_show(element)} "
                f"(use {use}, separated by commas)"
            )
        base, step_text = match.group("base"), match.group("step")
        if base == "*":
            low, high = spec.low, spec.high
        elif "-" in base:
            first, last = base.split("-")
            low, high = _value(first, spec, text), _value(last, spec, text)
            if spec is _DOW and high == 0 and last.lower() == "sun":
                high = 7  # `fri-sun`: Sunday closing a range is day 7
            if low > high:
                raise CronSyntaxError(
                    f"{spec.name} field {_show(text)}: range {_show(base)} goes backwards"
                )
        else:
            low = _value(base, spec, text)
            # `N/S` means N-MAX/S (croniter, Quartz); a bare `N` is just N.
            high = spec.high if step_text is not None else low
        step = 1
        if step_text is not None:
            step = int(step_text) if len(step_text) <= 4 else 0
            if not 1 <= step <= spec.high - spec.low + 1:
                raise CronSyntaxError(
                    f"{spec.name} field {_show(text)}: step {_show(step_text)} must be between "
                    f"1 and {spec.high - spec.low + 1}"
                )
        for number in range(low, high + 1, step):
            mask |= 1 << number
    return mask


@lru_cache(maxsize=16384)
def parse_cron(expression: str) -> CronFields:
    """Parse `expression`; CronSyntaxError with a clear message when it is not valid.

    Cached: a cluster has many jobs and few distinct expressions.
    """
    if not isinstance(expression, str):
        raise CronSyntaxError(f"a schedule must be a string, not {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CronSyntaxError(
            f"schedule is {len(expression)} characters long; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    stripped = expression.strip()
    if stripped == "":
        raise CronSyntaxError("empty schedule")
    # Tabs separate fields like spaces; any other control or non-ASCII character is a mistake.
    if not (stripped.isascii() and stripped.replace("\t", " ").isprintable()):
        raise CronSyntaxError(f"schedule {_show(stripped)} contains characters cron does not use")
    if stripped.startswith("@"):
        macro = stripped.lower()
        if macro not in MACROS:
            known = " ".join(sorted(MACROS))
            raise CronSyntaxError(f"unknown macro {_show(stripped)}; known macros: {known}")
        fields = MACROS[macro].split()
        text = macro
    else:
        fields = stripped.split()
        text = " ".join(fields)
    if len(fields) == 5:
        fields = ["0", *fields]
        has_seconds = False
    elif len(fields) == 6:
        has_seconds = True
    else:
        raise CronSyntaxError(
            f"schedule {_show(stripped)} has {len(fields)} field{'' if len(fields) == 1 else 's'}"
            "; expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 (seconds first), or a macro "
            "such as @daily"
        )
    seconds = _parse_field(fields[0], _SECOND)
    minutes = _parse_field(fields[1], _MINUTE)
    hours = _parse_field(fields[2], _HOUR)
    found = _FormsFound()
    days = _parse_field(fields[3], _DOM, found.dom)
    months = _parse_field(fields[4], _MONTH)
    weekdays = _parse_field(fields[5], _DOW, found.dow)
    forms = found.forms()
    if weekdays & (1 << 7):  # 7 is another name for Sunday
        weekdays = (weekdays | 1) & ~(1 << 7)
    dom_star = fields[3].startswith("*")
    dow_star = fields[5].startswith("*")
    # When both day fields must match, make sure the day-of-month exists in an allowed month
    # (L and LW always do; NW where day N does).
    possible = days | (forms.nearest if forms is not None else 0)
    if (
        (dom_star or dow_star)
        and not (forms is not None and (forms.last or forms.last_weekday))
        and not any(
            possible & (1 << day) and months & (1 << month)
            for month in range(1, 13)
            for day in range(1, _MAX_DAYS[month] + 1)
        )
    ):
        raise CronSyntaxError(
            f"schedule {_show(text)} never fires: no allowed day of the month occurs in "
            "an allowed month"
        )
    return CronFields(
        text=text,
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=weekdays,
        dom_star=dom_star,
        dow_star=dow_star,
        fixed_time=not (fields[1].startswith("*") or fields[2].startswith("*")),
        has_seconds=has_seconds,
        forms=forms,
    )
