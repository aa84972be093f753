"""Cron's month-dependent day forms: `L`, `LW`, `NW` (day of month), `NL`, `N#K` (day of
week). Against cronsim (an independent implementation, where it has the form) and the
brute-force oracle in cron_oracle.py (every form, `NW` included), across DST changes."""

from __future__ import annotations

import functools
import random
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from cron_oracle import offset_changes, oracle_cron, oracle_fires
from cronsim import CronSim

from zksched.core.schedule import CronSyntaxError, Schedule, next_fires, parse_cron

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Europe/London",
    "America/Santiago",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "UTC",
]


@functools.cache
def changes_of(zone: str) -> list[int]:
    return offset_changes(ZoneInfo(zone), 2024, 2031)


def dates(expr: str, zone: str, after: str, count: int = 4) -> list[str]:
    schedule = Schedule.parse(expr, zone)
    start = datetime.fromisoformat(after).astimezone(UTC)
    return [
        f.astimezone(ZoneInfo(zone)).date().isoformat() for f in next_fires(schedule, start, count)
    ]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 0 L * *", ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"]),
        ("0 0 LW * *", ["2026-01-30", "2026-02-27", "2026-03-31", "2026-04-30"]),  # 31 Jan: Sat
        ("0 0 15W * *", ["2026-01-15", "2026-02-16", "2026-03-16", "2026-04-15"]),  # Sun -> Mon
        ("0 0 1W * *", ["2026-01-01", "2026-02-02", "2026-03-02", "2026-04-01"]),  # never Jan 30
        ("0 0 * * 5L", ["2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24"]),  # last Friday
        ("0 0 * * mon#2", ["2026-01-12", "2026-02-09", "2026-03-09", "2026-04-13"]),
        ("0 0 * * 1#5", ["2026-03-30", "2026-06-29", "2026-08-31", "2026-11-30"]),
        ("0 0 L 2 *", ["2026-02-28", "2027-02-28", "2028-02-29", "2029-02-28"]),
    ],
)
def test_each_form_fires_on_the_days_it_names(expr: str, expected: list[str]) -> None:
    assert dates(expr, "Europe/Berlin", "2025-12-31T12:00:00+01:00") == expected


def test_a_saturday_first_or_a_sunday_last_stays_in_its_month() -> None:
    # 2026-08-01 is a Saturday: 1W is Monday the 3rd, not Friday 31 July
    assert dates("0 0 1W 8 *", "UTC", "2026-07-01T00:00:00+00:00", 1) == ["2026-08-03"]
    # 2026-05-31 is a Sunday: 31W is Friday the 29th, not Monday 1 June
    assert dates("0 0 31W 5 *", "UTC", "2026-05-01T00:00:00+00:00", 1) == ["2026-05-29"]


def test_forms_join_the_day_rule_like_values() -> None:
    # both day fields restricted: either fires (the 1st, or the second Monday)
    assert dates("0 0 1 * 1#2", "UTC", "2026-01-01T12:00:00+00:00", 3) == [
        "2026-01-12",
        "2026-02-01",
        "2026-02-09",
    ]
    # day of month unrestricted: both must match, so the form alone decides
    assert dates("0 0 */1 * 5L", "UTC", "2026-01-01T12:00:00+00:00", 1) == ["2026-01-30"]


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("0 0 L/2 * *", "a step applies to numbers and ranges, not to L, W or #"),
        ("0 0 * * 1#6", "the number after # must be 1-5"),
        ("0 0 * * 1#0", "the number after # must be 1-5"),
        ("0 0 32W * *", "the day before W must be 1-31"),
        ("0 0 0W * *", "the day before W must be 1-31"),
        ("0 0 30W 2 *", "never fires"),
        ("0 0 ? * *", "use *, N, A-B, */S, A-B/S, N/S, L, LW or NW"),
        ("0 0 * * 5W", "is not a number or a name"),
        ("0 0 * * 5?", "use *, N, A-B, */S, A-B/S, N/S, NL or N#K"),
        ("0 0 * * 8L", "out of range 0-7"),
        ("0 0 L-3 * *", "(days before the last) is not supported; use L or LW"),
        ("0 0 H * *", "'H' is not a number"),
    ],
)
def test_a_form_that_does_not_fit_is_refused_with_its_reason(expr: str, says: str) -> None:
    with pytest.raises(CronSyntaxError, match=None) as refused:
        parse_cron(expr)
    assert says in str(refused.value)


# -- random expressions: cronsim and the oracle -------------------------------------------------


def _dom(rng: random.Random, w: bool) -> str:
    if rng.random() < 0.25:
        return "*"
    forms = ["L", "LW"] + ([f"{rng.randint(1, 31)}W"] if w else [])
    plain = [str(rng.randint(1, 31)), f"{rng.randint(1, 14)}-{rng.randint(15, 31)}"]
    return ",".join(
        rng.choice(forms + plain if rng.random() < 0.5 else forms) for _ in range(rng.randint(1, 2))
    )


def _dow(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return "*"
    day = rng.randint(0, 7)
    forms = [f"{day}L", f"{day}#{rng.randint(1, 5)}"]
    plain = [str(day), f"{rng.randint(0, 3)}-{rng.randint(3, 6)}"]
    return ",".join(
        rng.choice(forms + plain if rng.random() < 0.5 else forms) for _ in range(rng.randint(1, 2))
    )


def _expression(rng: random.Random, w: bool = False) -> str:
    minute = rng.choice(["0", "30", "*/15", "59"])
    hour = rng.choice(["1", "2", "3", "0", "*", "*/6"])  # DST changes happen at 1-3 o'clock
    month = rng.choice(["*", "*", "3", "10,11", "2-4", "9-12"])
    while True:
        dom, dow = _dom(rng, w), _dow(rng)
        if "L" in dom + dow or "W" in dom or "#" in dow:
            return f"{minute} {hour} {dom} {month} {dow}"


def _start(rng: random.Random, zone: str) -> datetime:
    changes = changes_of(zone)
    if changes and rng.random() < 0.8:  # just before a DST change, usually
        anchor = rng.choice(changes) - rng.randint(0, 40 * 86_400)
    else:
        first = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp())
        anchor = first + rng.randint(0, 6 * 365 * 86_400)
    return datetime.fromtimestamp(anchor, UTC)


def test_the_forms_agree_with_cronsim_on_600_random_expressions_across_dst() -> None:
    rng = random.Random(20261202)
    checked = crossing = 0
    for _ in range(600):
        expr, zone = _expression(rng), rng.choice(ZONES)
        start = _start(rng, zone)
        try:
            schedule = Schedule.parse(expr, zone)
        except ValueError:
            continue  # never fires: cronsim would search forever
        ours = next_fires(schedule, start, 12)
        theirs = CronSim(expr, start.astimezone(ZoneInfo(zone)))
        expected = [next(theirs).astimezone(UTC) for _ in range(12)]
        assert ours == expected, (expr, zone, start.isoformat())
        checked += 1
        offsets = {f.astimezone(ZoneInfo(zone)).utcoffset() for f in [start, *ours]}
        crossing += len(offsets) > 1
    assert checked >= 500 and crossing >= 100, (checked, crossing)


def test_every_form_agrees_with_the_oracle_around_dst_changes() -> None:
    """`NW` too (cronsim has no `W`): the oracle walks real time minute by minute."""
    rng = random.Random(7)
    for _ in range(30):
        expr, zone = _expression(rng, w=True), rng.choice(ZONES[:4])
        start = int(_start(rng, zone).timestamp())
        end = start + 40 * 86_400
        expected = oracle_fires(oracle_cron(expr), ZoneInfo(zone), start, end)
        try:
            schedule = Schedule.parse(expr, zone)
        except ValueError:
            assert expected == [], expr
            continue
        low, high = datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)
        got = [int(f.timestamp()) for f in schedule.fires_between(low, high)]
        assert got == expected, (expr, zone, low.isoformat())
