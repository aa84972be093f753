"""Table tests for the schedule math: the SPEC's DST and day rules, pinned to real dates."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.schedule import Schedule, ScheduleError, next_fires

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
APIA = ZoneInfo("Pacific/Apia")


def local(expr: str, zone: str, after: datetime, count: int) -> list[str]:
    """The next `count` fires of `expr` in `zone`, written in that zone."""
    tz = ZoneInfo(zone)
    return [
        t.astimezone(tz).isoformat() for t in next_fires(Schedule.parse(expr, zone), after, count)
    ]


def on_day(expr: str, zone: str, day: str) -> list[str]:
    """Every fire of `expr` during the local calendar day `day` (YYYY-MM-DD), in local time."""
    tz = ZoneInfo(zone)
    start = datetime.fromisoformat(day).replace(tzinfo=tz)
    end = start + timedelta(days=1, hours=3)  # generous: the day may be 25 h long
    schedule = Schedule.parse(expr, zone)
    fires = [t.astimezone(tz) for t in schedule.fires_between(start - timedelta(seconds=1), end)]
    return [t.isoformat() for t in fires if t.date().isoformat() == day]


# -- the SPEC's table ------------------------------------------------------------------------


def test_berlin_fixed_time_in_the_skipped_hour_fires_once_at_the_jump() -> None:
    assert on_day("30 2 * * *", "Europe/Berlin", "2026-03-29") == ["2026-03-29T03:00:00+02:00"]
    # and returns to 02:30 the next day
    assert local("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 29, 12, tzinfo=BERLIN), 1) == [
        "2026-03-30T02:30:00+02:00"
    ]


def test_berlin_fixed_time_in_the_repeated_hour_fires_once_at_the_first_occurrence() -> None:
    assert on_day("30 2 * * *", "Europe/Berlin", "2026-10-25") == ["2026-10-25T02:30:00+02:00"]
    after_first = datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN)  # fold=0: the first 02:30
    assert local("30 2 * * *", "Europe/Berlin", after_first, 1) == ["2026-10-26T02:30:00+01:00"]


def test_berlin_hourly_fires_in_both_repeated_hours() -> None:
    fires = on_day("0 * * * *", "Europe/Berlin", "2026-10-25")
    assert len(fires) == 25
    assert fires[1:5] == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_berlin_hourly_skips_the_missing_hour() -> None:
    fires = on_day("0 * * * *", "Europe/Berlin", "2026-03-29")
    assert len(fires) == 23
    assert "2026-03-29T01:00:00+01:00" in fires
    assert "2026-03-29T03:00:00+02:00" in fires


def test_star_step_in_day_of_week_counts_as_unrestricted() -> None:
    # `*/3` starts with `*`: the day must match both fields (the 1st AND Sun/Wed/Sat),
    # not either of them as for a restricted field.
    fires = local("0 0 1 * */3", "UTC", datetime(2026, 1, 1, tzinfo=UTC), 4)
    assert fires == [
        "2026-02-01T00:00:00+00:00",  # Sunday
        "2026-03-01T00:00:00+00:00",  # Sunday
        "2026-04-01T00:00:00+00:00",  # Wednesday
        "2026-07-01T00:00:00+00:00",  # Wednesday (May 1 is a Friday, June 1 a Monday)
    ]


def test_star_step_in_day_of_month_counts_as_unrestricted() -> None:
    # every third day of the month that is also a Monday
    fires = local("0 0 */3 * 1", "UTC", datetime(2026, 1, 1, tzinfo=UTC), 3)
    assert fires == [
        "2026-01-19T00:00:00+00:00",
        "2026-02-16T00:00:00+00:00",
        "2026-03-16T00:00:00+00:00",
    ]


def test_both_day_fields_restricted_means_either() -> None:
    fires = local("0 0 1 * 1", "UTC", datetime(2026, 1, 1, tzinfo=UTC), 5)
    assert fires == [
        "2026-01-05T00:00:00+00:00",
        "2026-01-12T00:00:00+00:00",
        "2026-01-19T00:00:00+00:00",
        "2026-01-26T00:00:00+00:00",
        "2026-02-01T00:00:00+00:00",  # the 1st, a Sunday
    ]


def test_all_days_range_still_counts_as_restricted() -> None:
    # `1-7` is every day but does not start with `*`: the day-of-month 15 OR any weekday.
    assert len(on_day("0 0 15 * 1-7", "UTC", "2026-01-02")) == 1


# -- more zones ------------------------------------------------------------------------------


def test_new_york_spring_forward_and_fall_back() -> None:
    assert on_day("30 2 * * *", "America/New_York", "2026-03-08") == ["2026-03-08T03:00:00-04:00"]
    assert on_day("30 1 * * *", "America/New_York", "2026-11-01") == ["2026-11-01T01:30:00-04:00"]
    assert on_day("*/30 1 * * *", "America/New_York", "2026-11-01") == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
    ]


def test_lord_howe_half_hour_shift() -> None:
    # 2026-10-04 02:00 +10:30 -> 02:30 +11:00: 02:15 is skipped, 02:30 exists.
    assert on_day("15 2 * * *", "Australia/Lord_Howe", "2026-10-04") == [
        "2026-10-04T02:30:00+11:00"
    ]
    assert on_day("30 2 * * *", "Australia/Lord_Howe", "2026-10-04") == [
        "2026-10-04T02:30:00+11:00"
    ]
    assert on_day("*/15 2 * * *", "Australia/Lord_Howe", "2026-10-04") == [
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T02:45:00+11:00",
    ]
    # 2026-04-05 02:00 +11:00 -> 01:30 +10:30: 01:30-01:59 happen twice.
    assert on_day("45 1 * * *", "Australia/Lord_Howe", "2026-04-05") == [
        "2026-04-05T01:45:00+11:00"
    ]
    assert on_day("*/15 1 * * *", "Australia/Lord_Howe", "2026-04-05") == [
        "2026-04-05T01:00:00+11:00",
        "2026-04-05T01:15:00+11:00",
        "2026-04-05T01:30:00+11:00",
        "2026-04-05T01:45:00+11:00",
        "2026-04-05T01:30:00+10:30",
        "2026-04-05T01:45:00+10:30",
    ]


def test_apia_skipped_a_whole_day() -> None:
    # Samoa went from 2011-12-29T23:59:59-10:00 straight to 2011-12-31T00:00:00+14:00.
    assert local("0 12 * * *", "Pacific/Apia", datetime(2011, 12, 29, 13, tzinfo=APIA), 2) == [
        "2011-12-31T00:00:00+14:00",  # the skipped noon of the 30th, at the jump
        "2011-12-31T12:00:00+14:00",
    ]
    assert on_day("0 12 * * *", "Pacific/Apia", "2011-12-30") == []


def test_zone_without_dst() -> None:
    assert local("30 2 * * *", "Asia/Tokyo", datetime(2026, 3, 29, tzinfo=UTC), 2) == [
        "2026-03-30T02:30:00+09:00",
        "2026-03-31T02:30:00+09:00",
    ]


# -- six fields and macros ---------------------------------------------------------------------


def test_six_fields_put_seconds_first() -> None:
    assert local("30 0 12 * * *", "UTC", datetime(2026, 1, 1, tzinfo=UTC), 1) == [
        "2026-01-01T12:00:30+00:00"
    ]
    assert local("*/20 * * * * *", "UTC", datetime(2026, 1, 1, tzinfo=UTC), 4) == [
        "2026-01-01T00:00:20+00:00",
        "2026-01-01T00:00:40+00:00",
        "2026-01-01T00:01:00+00:00",
        "2026-01-01T00:01:20+00:00",
    ]


def test_six_field_fixed_time_job_fires_once_for_a_skipped_minute() -> None:
    # every second of 02:30 is skipped on the spring-forward day: one fire, at the jump
    assert on_day("* 30 2 * * *", "Europe/Berlin", "2026-03-29") == ["2026-03-29T03:00:00+02:00"]


@pytest.mark.parametrize(
    ("macro", "same_as"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_macros(macro: str, same_as: str) -> None:
    after = datetime(2026, 10, 24, 20, tzinfo=BERLIN)
    assert local(macro, "Europe/Berlin", after, 8) == local(same_as, "Europe/Berlin", after, 8)
    assert Schedule.parse(macro).expr == macro.lower()


def test_hourly_macro_is_not_a_fixed_time_job() -> None:
    assert not Schedule.parse("@hourly").fixed_time
    assert Schedule.parse("@daily").fixed_time
    assert Schedule.parse("0 2 * * *").fixed_time
    assert not Schedule.parse("*/5 2 * * *").fixed_time
    assert not Schedule.parse("0 */2 * * *").fixed_time


# -- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "values"),
    [
        ("0 0 * * 7", "sunday"),
        ("0 0 * * 0,7", "sunday"),
        ("0 0 * * SUN", "sunday"),
        ("0 0 * * sat-sun", "weekend"),
        ("0 0 * * fri-sun/2", "fri-sun"),
        ("0 0 * * 6-7", "weekend"),
    ],
)
def test_day_of_week_spellings(expr: str, values: str) -> None:
    days = {
        "sunday": {"Sun"},
        "weekend": {"Sat", "Sun"},
        "fri-sun": {"Fri", "Sun"},
    }[values]
    fires = next_fires(Schedule.parse(expr), datetime(2026, 1, 1, tzinfo=UTC), 6)
    assert {t.strftime("%a") for t in fires} == days


@pytest.mark.parametrize(
    ("expr", "minutes"),
    [
        ("5/15 * * * *", [5, 20, 35, 50]),
        ("1-1/3 * * * *", [1]),  # croniter reads this as */3
        ("7-7 * * * *", [7]),  # croniter reads this as *
        ("58-59,0-1 * * * *", [0, 1, 58, 59]),
        ("*/25 * * * *", [0, 25, 50]),
        ("00,05 * * * *", [0, 5]),
    ],
)
def test_minute_field_expansion(expr: str, minutes: list[int]) -> None:
    fires = next_fires(
        Schedule.parse(expr), datetime(2026, 1, 1, 0, 0, tzinfo=UTC) - timedelta(seconds=1), 12
    )
    assert sorted({t.minute for t in fires}) == minutes


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty schedule"),
        ("   ", "empty schedule"),
        ("* * * *", "has 4 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("60 * * * *", "minute field '60': 60 is out of range 0-59"),
        ("* 24 * * *", "hour field"),
        ("* * 0 * *", "day-of-month field"),
        ("* * 32 * *", "out of range 1-31"),
        ("* * * 13 *", "month field"),
        ("* * * * 8", "day-of-week field"),
        ("60 * * * * *", "second field"),
        ("5-2 * * * *", "goes backwards"),
        ("* * * * fri-mon", "goes backwards"),
        ("*/0 * * * *", "step '0' must be between 1 and 60"),
        ("*/61 * * * *", "step"),
        ("*/99999999999 * * * *", "step"),
        ("99999999999 * * * *", "out of range"),
        ("L * * * *", "is not a number"),
        ("0 0 L/2 * *", "day-of-month field 'L/2'"),
        ("0 0 ? * 1", "cannot read"),
        ("0 0 * * 1#9", "day-of-week field '1#9'"),
        ("H * * * *", "is not a number"),
        ("1,,2 * * * *", "empty list element"),
        ("1- * * * *", "cannot read"),
        ("-1 * * * *", "cannot read"),
        ("* * * foo *", "is not a number or a name"),
        ("* * * * monday", "is not a number or a name"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("0 0 31 2 */2", "never fires"),
        ("@reboot", "unknown macro"),
        ("@every 5m", "unknown macro"),
        ("0 2 * * *\x00", "characters cron does not use"),
        ("0 2 * * ٣", "characters cron does not use"),
        ("0\n2 * * *", "characters cron does not use"),
        ("* " * 600, "the limit is 1024"),
    ],
)
def test_bad_expressions_are_refused_with_a_reason(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        Schedule.parse(expr)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_both_day_fields_restricted_never_counts_as_impossible() -> None:
    # the 31st of February OR any Monday in February: fires on Mondays
    fires = next_fires(Schedule.parse("0 0 31 2 1"), datetime(2026, 1, 1, tzinfo=UTC), 2)
    assert [t.date().isoformat() for t in fires] == ["2026-02-02", "2026-02-09"]


def test_leap_day_schedule() -> None:
    fires = next_fires(Schedule.parse("0 0 29 2 *"), datetime(2096, 3, 1, tzinfo=UTC), 2)
    assert [t.year for t in fires] == [2104, 2108]  # 2100 is not a leap year


def test_whitespace_is_normalised() -> None:
    assert Schedule.parse("  0\t2  * *   *  ").expr == "0 2 * * *"


@pytest.mark.parametrize(
    "zone",
    [
        "Europe/Berln",
        "",
        "../etc/passwd",
        "/etc/localtime",
        "right/UTC",
        "localtime",
        "Europe",
        "Europe/Berlin\x00",
        "A" * 300,
        "posix/Europe/Berlin",
    ],
)
def test_unknown_zones_are_refused(zone: str) -> None:
    with pytest.raises(ScheduleError, match="unknown time zone"):
        Schedule.parse("0 2 * * *", zone)


# -- the API's contract ------------------------------------------------------------------------


def test_next_fire_is_strictly_after_and_utc() -> None:
    schedule = Schedule.parse("0 2 * * *", "Europe/Berlin")
    fire = schedule.next_fire(datetime(2026, 1, 1, tzinfo=UTC))
    assert fire == datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    assert fire.tzinfo is UTC
    assert schedule.next_fire(fire) == datetime(2026, 1, 2, 1, 0, tzinfo=UTC)
    just_before = fire - timedelta(microseconds=1)
    assert schedule.next_fire(just_before) == fire
    assert schedule.next_fire(fire + timedelta(microseconds=999_999)) == fire + timedelta(days=1)
    # any zone for the input, same answer
    assert schedule.next_fire(just_before.astimezone(timezone(timedelta(hours=-7)))) == fire


def test_naive_datetimes_are_refused() -> None:
    schedule = Schedule.parse("* * * * *")
    with pytest.raises(ValueError, match="time-zone aware"):
        schedule.next_fire(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="time-zone aware"):
        schedule.fires_between(datetime(2026, 1, 1), datetime(2026, 1, 2, tzinfo=UTC))
    with pytest.raises(ValueError, match="time-zone aware"):
        schedule.latest_fire(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2))
    with pytest.raises(ValueError, match="must be a datetime"):
        schedule.next_fire("2026-01-01")  # type: ignore[arg-type]


def test_fires_between_is_start_exclusive_end_inclusive() -> None:
    schedule = Schedule.parse("0 * * * *")
    start = datetime(2026, 1, 1, 0, tzinfo=UTC)
    end = datetime(2026, 1, 1, 3, tzinfo=UTC)
    assert [t.hour for t in schedule.fires_between(start, end)] == [1, 2, 3]
    assert list(schedule.fires_between(end, start)) == []
    assert schedule.latest_fire(start, end) == end
    assert schedule.latest_fire(start, end - timedelta(seconds=1)) == end - timedelta(hours=1)
    assert schedule.latest_fire(start, start + timedelta(minutes=59)) is None


def test_latest_fire_does_not_walk_every_instant(monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = Schedule.parse("* * * * * *")
    calls = 0
    original = Schedule._next

    def counting(self: Schedule, after: int, limit: int) -> int | None:
        nonlocal calls
        calls += 1
        return original(self, after, limit)

    monkeypatch.setattr(Schedule, "_next", counting)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    end = datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)
    assert schedule.latest_fire(start, end) == datetime(2026, 1, 1, tzinfo=UTC)
    sparse = Schedule.parse("0 30 2 * * 1", "Europe/Berlin")
    assert sparse.latest_fire(start, end) == datetime(2025, 12, 29, 1, 30, tzinfo=UTC)
    assert calls < 100  # a year is 31.5 million seconds


def test_latest_fire_agrees_with_fires_between() -> None:
    schedule = Schedule.parse("*/7 1-3 * * *", "Europe/Berlin")
    start = datetime(2026, 10, 24, 22, 13, tzinfo=UTC)
    for hours in range(1, 30):
        end = start + timedelta(hours=hours, minutes=hours * 7)
        fires = list(schedule.fires_between(start, end))
        assert schedule.latest_fire(start, end) == (fires[-1] if fires else None)


def test_next_fires_counts() -> None:
    schedule = Schedule.parse("@daily")
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert next_fires(schedule, after, 0) == []
    assert len(next_fires(schedule, after, 400)) == 400
    with pytest.raises(ValueError):
        next_fires(schedule, after, -1)


def test_the_end_of_time() -> None:
    schedule = Schedule.parse("@yearly")
    with pytest.raises(ScheduleError, match="before the year 9999"):
        schedule.next_fire(datetime(9998, 6, 1, tzinfo=UTC))
    assert next_fires(schedule, datetime(9996, 6, 1, tzinfo=UTC), 5) == [
        datetime(9997, 1, 1, tzinfo=UTC),
        datetime(9998, 1, 1, tzinfo=UTC),
    ]
    with pytest.raises(ScheduleError, match="supported range"):
        schedule.next_fire(datetime(1, 6, 1, tzinfo=UTC))
    assert list(
        schedule.fires_between(datetime(9997, 6, 1, tzinfo=UTC), datetime.max.replace(tzinfo=UTC))
    ) == [datetime(9998, 1, 1, tzinfo=UTC)]


def test_schedules_are_immutable_values() -> None:
    schedule = Schedule.parse("0 2 * * *", "Europe/Berlin")
    with pytest.raises(AttributeError):
        schedule._timezone = "UTC"
    assert schedule == Schedule.parse("0  2 * * *", "Europe/Berlin")
    assert schedule != Schedule.parse("0 2 * * *", "UTC")
    assert hash(schedule) == hash(Schedule.parse("0 2 * * *", "Europe/Berlin"))
    assert pickle.loads(pickle.dumps(schedule)) == schedule
    assert (schedule.expr, schedule.timezone) == ("0 2 * * *", "Europe/Berlin")
    assert repr(schedule) == "Schedule('0 2 * * *', timezone='Europe/Berlin')"


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["0 2 * * *", "*/7 * * * * *", "30 1 * * 0", "@at 2027-03-28T01:30:00Z"]),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 400_000)), min_size=1, max_size=30),
)
def test_queries_asked_again_give_what_the_math_gives(
    expr: str, asks: list[tuple[int, int]]
) -> None:
    """Each query remembers its last answer (a takeover asks the same for every job of a
    schedule): repeated, interleaved and fresh questions all get the computed answer."""
    schedule = Schedule.parse(expr, "Europe/Paris")
    base = 1_790_000_000
    for back, span in asks:
        start, end = base - back * 3600, base + span
        for _ in range(2):
            after = datetime.fromtimestamp(end, UTC)
            assert schedule.next_fire(after).timestamp() == schedule._next(end, 2**40)
            latest = schedule.latest_fire(datetime.fromtimestamp(start, UTC), after)
            computed = schedule._latest(start, end)
            assert (None if latest is None else latest.timestamp()) == computed


def test_a_fresh_schedule_answers_any_first_query_by_the_math() -> None:
    """Nothing asked yet is no answer to any time (the epoch's last second included)."""
    before_epoch = datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)
    schedule = Schedule.parse("0 0 * * *", "UTC")
    assert schedule.next_fire(before_epoch) == datetime(1970, 1, 1, tzinfo=UTC)
