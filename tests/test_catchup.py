from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.catchup import COUNT_LIMIT, RUN_LIMIT, plan_catchup
from zksched.core.schedule import Schedule

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EVERY_MINUTE = Schedule.parse("* * * * *")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_all_runs_every_missed_instant_inside_the_window_oldest_first() -> None:
    plan = plan_catchup(EVERY_MINUTE, "all", 600, at(0), at(5.5))
    assert plan.run == tuple(at(m) for m in range(1, 6))
    assert plan.skipped == 0


def test_all_skips_what_is_older_than_the_window() -> None:
    plan = plan_catchup(EVERY_MINUTE, "all", 180, at(0), at(10))
    assert plan.run == (at(8), at(9), at(10))  # (now - 3 min, now]
    assert plan.skipped == 7
    assert plan.first_skipped == at(1) and plan.last_skipped == at(7)


def test_latest_runs_only_the_newest_and_skips_the_rest() -> None:
    plan = plan_catchup(EVERY_MINUTE, "latest", 3600, at(0), at(5.5))
    assert plan.run == (at(5),)
    assert plan.skipped == 4


def test_latest_outside_the_window_runs_nothing() -> None:
    plan = plan_catchup(EVERY_MINUTE, "latest", 20, at(0), at(5.5))
    assert plan.run == ()
    assert plan.skipped == 5


def test_none_runs_nothing_and_counts_every_missed_instant() -> None:
    plan = plan_catchup(EVERY_MINUTE, "none", 3600, at(0), at(5.5))
    assert plan.run == () and plan.skipped == 5


def test_nothing_missed() -> None:
    assert plan_catchup(EVERY_MINUTE, "all", 3600, at(5), at(5.5)).run == ()
    assert plan_catchup(EVERY_MINUTE, "all", 3600, at(6), at(5.5)).skipped == 0


def test_counting_a_huge_backlog_of_an_every_second_job_is_bounded() -> None:
    every_second = Schedule.parse("* * * * * *")
    plan = plan_catchup(every_second, "latest", 3600, T0, T0 + timedelta(days=7))
    assert plan.run == (T0 + timedelta(days=7),)
    assert plan.skipped == COUNT_LIMIT


@settings(max_examples=200, deadline=None)
@given(
    policy=st.sampled_from(["all", "latest", "none"]),
    after=st.integers(0, 300),
    gap=st.integers(0, 600),
    window=st.integers(1, 900),
)
def test_run_and_skipped_partition_the_missed_instants(
    policy: str, after: int, gap: int, window: int
) -> None:
    schedule = Schedule.parse("*/7 * * * * *")
    start = T0 + timedelta(seconds=after)
    now = start + timedelta(seconds=gap)
    missed = list(schedule.fires_between(start, now))
    plan = plan_catchup(schedule, policy, window, start, now)
    assert len(plan.run) + plan.skipped == len(missed)
    assert list(plan.run) == sorted(plan.run)
    assert all(now - timedelta(seconds=window) <= t <= now and t > start for t in plan.run)
    if policy == "latest" and plan.run:
        assert plan.run == (missed[-1],)
    if policy == "none":
        assert plan.run == ()


@pytest.mark.parametrize("policy", ["all", "latest", "none"])
def test_plans_are_in_utc(policy: str) -> None:
    berlin = Schedule.parse("30 2 * * *", "Europe/Berlin")
    plan = plan_catchup(
        berlin,
        policy,
        86400 * 3,
        datetime(2026, 3, 27, tzinfo=UTC),
        datetime(2026, 3, 30, tzinfo=UTC),
    )
    assert all(t.tzinfo is not None and t.utcoffset() == timedelta(0) for t in plan.run)


def test_all_runs_the_newest_instants_when_the_backlog_passes_the_limit() -> None:
    every_second = Schedule.parse("* * * * * *")
    now = T0 + timedelta(seconds=RUN_LIMIT + 500)
    plan = plan_catchup(every_second, "all", 86400, T0, now)
    assert len(plan.run) == RUN_LIMIT and plan.run[-1] == now
    assert plan.skipped == 500  # the oldest, covered by the skip record
    assert plan.last_skipped is not None and plan.last_skipped < plan.run[0]


def test_a_trigger_never_takes_a_scheduled_instant() -> None:
    from zksched.core.catchup import is_scheduled, trigger_instant

    minutely = Schedule.parse("* * * * *")
    assert trigger_instant(minutely, at(3)) == at(3) - timedelta(seconds=1)
    assert trigger_instant(minutely, at(3.5)) == at(3.5)
    assert not is_scheduled(minutely, trigger_instant(minutely, at(7)))
    every_second = Schedule.parse("* * * * * *")
    assert trigger_instant(every_second, at(2)) == at(2)  # no free second: shares it


def test_catchup_starts_after_the_newest_scheduled_record_not_a_trigger() -> None:
    from zksched.core.catchup import newest_scheduled

    records = [at(1), at(2), at(4.25)]  # the last one: a manual trigger between instants
    assert newest_scheduled(EVERY_MINUTE, records) == at(2)
    assert newest_scheduled(EVERY_MINUTE, [at(4.25)]) is None
