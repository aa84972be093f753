"""Property tests: zksched's schedule math against the brute-force oracle in cron_oracle.py.

Windows are placed around real UTC-offset changes of zones with odd DST rules (Berlin, New
York, Lord Howe's 30-minute shift, Chatham's +12:45, Dublin's negative DST, Apia skipping a
whole day in 2011) and in zones without DST, so skipped and repeated wall-clock times come up
in most cases.
"""

from __future__ import annotations

import functools
import random
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from cron_oracle import offset_changes, oracle_cron, oracle_fires
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zksched.core.schedule import Schedule, ScheduleError

DST_ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Europe/Dublin",
    "America/St_Johns",
    "Pacific/Apia",
]
FLAT_ZONES = ["UTC", "Asia/Tokyo", "Asia/Kolkata"]
FIRST_YEAR, LAST_YEAR = 2005, 2035
_FIRST = int(datetime(FIRST_YEAR, 1, 1, tzinfo=UTC).timestamp())
_LAST = int(datetime(LAST_YEAR, 1, 1, tzinfo=UTC).timestamp())

_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"]


@functools.cache
def changes_of(zone: str) -> list[int]:
    return offset_changes(ZoneInfo(zone), FIRST_YEAR, LAST_YEAR)


def _utc(instant: int) -> datetime:
    return datetime.fromtimestamp(instant, UTC)


# -- expression strategies ------------------------------------------------------------------
# Fields are built by a seeded random.Random rather than by nested hypothesis draws: the
# latter cost milliseconds per example, which would dominate the run. Failures print the
# expression itself, so losing hypothesis's shrinking of its parts costs little.

_MACROS = ["@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"]


def _number(rng: random.Random, low: int, high: int, hot: tuple[int, ...]) -> int:
    if hot and rng.random() < 0.5:
        return rng.choice(hot)
    return rng.randint(low, high)


def _element(
    rng: random.Random, low: int, high: int, hot: tuple[int, ...], names: list[str] | None
) -> str:
    def show(number: int) -> str:
        if names is not None and rng.random() < 0.25:
            name = names[number - low]
            return name.upper() if rng.random() < 0.5 else name
        return str(number)

    kind = rng.choice(["value", "value", "range", "range-step", "start-step"])
    first = _number(rng, low, high, hot)
    if kind == "value":
        return show(first)
    if kind == "start-step":
        return f"{show(first)}/{rng.randint(1, high - low + 1)}"
    last = rng.randint(first, high)
    if kind == "range":
        return f"{show(first)}-{show(last)}"
    return f"{show(first)}-{show(last)}/{rng.randint(1, high - low + 1)}"


def random_field(
    rng: random.Random,
    low: int,
    high: int,
    *,
    hot: tuple[int, ...] = (),
    names: list[str] | None = None,
    star_weight: int = 2,
) -> str:
    kind = rng.randint(0, 7 + star_weight)
    if kind >= 8:
        return "*"
    if kind == 0:
        step = rng.randint(1, 6) if rng.random() < 0.5 else rng.randint(1, high - low + 1)
        return f"*/{step}"
    if kind <= 4:
        return _element(rng, low, high, hot, names)
    return ",".join(_element(rng, low, high, hot, names) for _ in range(rng.randint(2, 4)))


def _minute(rng: random.Random) -> str:
    return random_field(rng, 0, 59, hot=(0, 1, 15, 29, 30, 45, 59))


def _hour(rng: random.Random) -> str:
    return random_field(rng, 0, 23, hot=(0, 1, 2, 3, 23), star_weight=3)


def _dom(rng: random.Random, star_weight: int = 12) -> str:
    return random_field(rng, 1, 31, hot=(1, 28, 29, 30, 31), star_weight=star_weight)


def _month(rng: random.Random, star_weight: int = 16) -> str:
    return random_field(rng, 1, 12, names=_MONTHS, star_weight=star_weight)


def _dow(rng: random.Random, star_weight: int = 10) -> str:
    return random_field(rng, 0, 7, names=_DAYS, star_weight=star_weight)


def _second(rng: random.Random) -> str:
    return random_field(rng, 0, 59, hot=(0, 30, 59), star_weight=3)


_SEEDS = st.integers(0, 2**64 - 1).map(random.Random)


def five_field() -> st.SearchStrategy[str]:
    def build(rng: random.Random) -> str:
        if rng.random() < 1 / 16:
            return rng.choice(_MACROS)
        return " ".join([_minute(rng), _hour(rng), _dom(rng), _month(rng), _dow(rng)])

    return _SEEDS.map(build)


def six_field() -> st.SearchStrategy[str]:
    def build(rng: random.Random) -> str:
        return " ".join([_second(rng), _minute(rng), _hour(rng), _dom(rng), _month(rng), _dow(rng)])

    return _SEEDS.map(build)


def day_fields() -> st.SearchStrategy[tuple[str, str, str]]:
    return _SEEDS.map(lambda rng: (_dom(rng, 2), _month(rng, 3), _dow(rng, 2)))


def plain_fields() -> st.SearchStrategy[tuple[str, str, str, str, str]]:
    return _SEEDS.map(
        lambda rng: (_minute(rng), _hour(rng), _dom(rng, 4), _month(rng, 6), _dow(rng, 4))
    )


@st.composite
def window(
    draw: st.DrawFn, zones: list[str], min_length: int, max_length: int, fractions: int = 3
) -> tuple[str, int, int, list[int]]:
    """(zone, start, end, probes): a stretch of real time, usually holding an offset change.

    The probes are instants inside it to ask next_fire about: random ones and, around an
    offset change, the second just before it and the change itself.
    """
    zone = draw(st.sampled_from(zones))
    length = draw(st.integers(min_length, max_length))
    changes = changes_of(zone)
    probes: list[int] = []
    if changes and draw(st.integers(0, 5)) > 0:
        anchor = draw(st.sampled_from(changes))
        start = anchor - draw(st.integers(0, length))
        probes += [p for p in (anchor - 1, anchor) if p >= start]
    else:
        start = draw(st.integers(_FIRST, _LAST))
    for fraction in draw(st.lists(st.floats(0, 1), max_size=fractions)):
        probes.append(start + int(length * fraction))
    return zone, start, start + length, probes


def _check_against_oracle(
    expr: str, zone: str, start: int, end: int, probes: list[int], micros: int
) -> None:
    expected = oracle_fires(oracle_cron(expr), ZoneInfo(zone), start, end)
    try:
        schedule = Schedule.parse(expr, zone)
    except ScheduleError as exc:
        # Refused as "never fires" (like `0 0 30 feb *`): then it must not fire here either.
        assert "never fires" in str(exc), exc
        assert expected == []
        return
    # The bounds may carry sub-second parts and any zone: only the instant counts.
    start_dt = (_utc(start) + timedelta(microseconds=micros)).astimezone(ZoneInfo(zone))
    end_dt = _utc(end) + timedelta(microseconds=micros)
    got = [int(t.timestamp()) for t in schedule.fires_between(start_dt, end_dt)]
    assert got == expected, (expr, zone, _utc(start))
    latest = schedule.latest_fire(start_dt, end_dt)
    assert (None if latest is None else int(latest.timestamp())) == (
        expected[-1] if expected else None
    )
    for probe in [start, *probes]:
        after = [t for t in expected if t > probe]
        next_fire = int(schedule.next_fire(_utc(probe)).timestamp())
        if after:
            assert next_fire == after[0], (expr, zone, _utc(probe))
        else:
            assert next_fire > end, (expr, zone, _utc(probe))


def fast(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


@fast(1200)
@given(
    expr=five_field(),
    span=window(DST_ZONES + FLAT_ZONES, 3600, 24 * 3600),
    micros=st.sampled_from([0, 0, 1, 999_999]),
)
def test_five_field_schedules_match_the_oracle(
    expr: str, span: tuple[str, int, int, list[int]], micros: int
) -> None:
    zone, start, end, probes = span
    _check_against_oracle(expr, zone, start, end, probes, micros)


@fast(400)
@given(
    expr=six_field(),
    span=window(DST_ZONES + FLAT_ZONES, 60, 2 * 3600),
)
def test_six_field_schedules_match_the_oracle(
    expr: str, span: tuple[str, int, int, list[int]]
) -> None:
    zone, start, end, probes = span
    _check_against_oracle(expr, zone, start, end, probes, 0)


# -- the day-of-month / day-of-week rule over long spans -----------------------------------------


@fast(600)
@given(
    days=day_fields(),
    start=st.dates(date(1990, 1, 1), date(2110, 1, 1)),
)
def test_day_rule_matches_a_day_by_day_walk(days: tuple[str, str, str], start: date) -> None:
    dom, month, dow = days
    expr = f"0 12 {dom} {month} {dow}"
    cron = oracle_cron(expr)
    try:
        schedule = Schedule.parse(expr)
    except ValueError:
        # Refused as "never fires": no day in a full 28-year calendar cycle may match.
        cycle = (date(2000, 1, 1) + timedelta(days=n) for n in range(366 * 28))
        assert not any(
            d.month in cron.months and cron.day_matches(datetime(d.year, d.month, d.day))
            for d in cycle
        ), expr
        return
    expected: list[date] = []
    day = start
    limit = start + timedelta(days=366 * 9)
    while len(expected) < 4 and day < limit:
        noon = datetime(day.year, day.month, day.day, 12)
        if noon.month in cron.months and cron.day_matches(noon):
            expected.append(day)
        day += timedelta(days=1)
    after = datetime(start.year, start.month, start.day, tzinfo=UTC)
    got: list[date] = []
    for _ in expected:
        fire = schedule.next_fire(after)
        got.append(fire.date())
        after = fire
    assert got == expected, expr


# -- agreement with croniter where croniter is right ----------------------------------------


def _croniter_expands_right(expr: str) -> bool:
    """False for the degenerate fields croniter expands wrongly (`5-5` becomes `*`)."""
    fields, _ = croniter.expand(expr)
    ours = oracle_cron(expr)
    theirs = [
        frozenset(range(low, high + 1)) if values == ["*"] else frozenset(map(int, values))
        for values, (low, high) in zip(
            fields, [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)], strict=True
        )
    ]
    return theirs == [ours.minutes, ours.hours, ours.doms, ours.months, ours.dows]


@fast(300)
@given(fields=plain_fields(), start=st.integers(_FIRST, _LAST))
def test_agrees_with_croniter_in_utc_for_plain_expressions(
    fields: tuple[str, str, str, str, str], start: int
) -> None:
    minute, hour, dom, month, dow = fields
    # croniter reads `*/N` and all-days ranges in the day fields differently from Vixie cron
    # (the very gap the SPEC names); keep to expressions where both readings agree.
    if dom != "*" and dow != "*":
        dom_values = oracle_cron(f"0 0 {dom} * *").doms
        dow_values = oracle_cron(f"0 0 * * {dow}").dows
        if (
            dom.startswith("*")
            or dow.startswith("*")
            or len(dom_values) == 31
            or len(dow_values) == 7
        ):
            return
    expr = f"{minute} {hour} {dom} {month} {dow}"
    if not _croniter_expands_right(expr):
        return
    try:
        schedule = Schedule.parse(expr)
    except ValueError:
        return  # never fires; croniter would search forever
    reference = croniter(expr, _utc(start))
    after = _utc(start)
    for _ in range(5):
        expected = reference.get_next(datetime)
        got = schedule.next_fire(after)
        assert got == expected, expr
        after = got
