from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.schedule import Schedule
from zksched.core.schedule.catchup import (
    COUNT_LIMIT,
    RUN_LIMIT,
    holes,
    next_records,
    outside_ranges,
    plan_catchup,
    unpruned,
)

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
    from zksched.core.schedule.catchup import is_scheduled, trigger_instant

    minutely = Schedule.parse("* * * * *")
    assert trigger_instant(minutely, at(3)) == at(3) - timedelta(seconds=1)
    assert trigger_instant(minutely, at(3.5)) == at(3.5)
    assert not is_scheduled(minutely, trigger_instant(minutely, at(7)))
    every_second = Schedule.parse("* * * * * *")
    assert trigger_instant(every_second, at(2)) == at(2)  # no free second: shares it


def test_catchup_starts_after_the_newest_scheduled_record_not_a_trigger() -> None:
    from zksched.core.schedule.catchup import newest_scheduled

    records = [at(1), at(2), at(4.25)]  # the last one: a manual trigger between instants
    assert newest_scheduled(EVERY_MINUTE, records) == at(2)
    assert newest_scheduled(EVERY_MINUTE, [at(4.25)]) is None


EVERY_SECOND = Schedule.parse("* * * * * *")


def sec(n: int) -> datetime:
    return T0 + timedelta(seconds=n)


def test_a_missing_instant_behind_a_newer_record_is_a_hole() -> None:
    # 0..5 ran but 3: a member claimed 4 and 5 while 3 waited for a retry, and died
    recorded = [sec(i) for i in (0, 1, 2, 4, 5)]
    assert holes(EVERY_SECOND, recorded, sec(-1)) == [sec(3)]
    assert holes(EVERY_SECOND, [sec(i) for i in range(6)], sec(-1)) == []
    # instants due after the lower bound (the window, the job's last change) and before the
    # first record never ran either
    assert holes(EVERY_SECOND, recorded, sec(-3)) == [sec(-2), sec(-1), sec(3)]


def test_holes_start_after_the_lower_bound_and_end_before_the_newest_record() -> None:
    recorded = [sec(0), sec(5)]
    assert holes(EVERY_SECOND, recorded, sec(2)) == [sec(3), sec(4)]
    assert holes(EVERY_SECOND, [], sec(-1)) == []
    assert holes(EVERY_SECOND, [sec(5)], sec(5)) == []


def test_a_trigger_record_is_no_newest_scheduled_record() -> None:
    trigger = sec(4) + timedelta(milliseconds=500)
    assert holes(EVERY_SECOND, [sec(0), sec(2), trigger], sec(-1)) == [sec(1)]


def test_no_hole_at_or_before_the_pruning_horizon() -> None:
    found = [sec(3), sec(6), sec(8)]
    assert unpruned(found, sec(6), records=50, keep=20) == [sec(8)]
    # no horizon: never pruned while fewer than `keep` records; else anything may have been
    assert unpruned(found, None, records=19, keep=20) == found
    assert unpruned(found, None, records=20, keep=20) == []


def test_only_the_record_after_a_hole_can_cover_it() -> None:
    recorded = [sec(0), sec(4), sec(9)]
    assert next_records([sec(1), sec(2), sec(5)], recorded) == [sec(4), sec(9)]
    assert outside_ranges([sec(1), sec(2), sec(5)], [(sec(2), sec(4))]) == [sec(1), sec(5)]


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 40), st.booleans(), st.sets(st.integers(0, 40))),
        min_size=1,
        max_size=60,
    ),
    keep=st.integers(1, 8),
    after=st.integers(-5, 20),
)
def test_a_hole_was_never_claimed_and_every_unclaimed_instant_after_the_horizon_is_one(
    steps: list[tuple[int, bool, set[int]]], keep: int, after: int
) -> None:
    """Members claim instants in any order, and now and then one prunes from what it knows of
    the folder (any part of it: its list can miss records others made), oldest first, down
    to `keep`, raising the horizon first. No hole was ever claimed (running it again would
    run it twice), and every instant never claimed after the horizon is found."""
    folder: set[int] = set()
    ever: set[int] = set()
    horizon: int | None = None
    for instant, prune, known in steps:
        if instant not in ever:
            folder.add(instant)
            ever.add(instant)
        listed = sorted(folder & known)
        if prune and len(listed) > keep:
            victims = listed[: len(listed) - keep]
            horizon = max(victims) if horizon is None else max(horizon, max(victims))
            folder -= set(victims)
    if not folder:
        return
    recorded = [sec(i) for i in folder]
    candidates = holes(EVERY_SECOND, recorded, sec(after))
    kept = unpruned(candidates, None if horizon is None else sec(horizon), len(folder), keep)
    found = {int((h - T0).total_seconds()) for h in kept}
    assert not found & ever
    if horizon is not None:
        floor = max(after, horizon)
        assert found == {i for i in range(floor + 1, max(folder)) if i not in ever}
