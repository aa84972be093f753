"""The audit's pure logic: spans, coverage (skip ranges included), gaps, duplicates, verdict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.audit import (
    GRACE_SECONDS,
    JobHistory,
    StoredFire,
    audit_cluster,
    audit_job,
    covered_intervals,
    span_start,
    uncovered,
)
from zksched.core.firekey import format_utc
from zksched.core.firerecord import FireRecord
from zksched.core.jobspec import JobSpec

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
LIVE = {7}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    return format_utc(at(seconds))


def spec(**changes: Any) -> JobSpec:
    base: dict[str, Any] = {"name": "tick", "schedule": "* * * * * *", "command": ("true",)}
    base.update(changes)
    return JobSpec(**base)


def fire(seconds: float, node: str | None = None, **changes: Any) -> StoredFire:
    base: dict[str, Any] = dict(
        job="tick",
        scheduled=iso(seconds),
        member_id="h-1",
        session=7,
        nonce="n",
        state="ok",
        claimed_at=iso(seconds),
    )
    base.update(changes)
    record = FireRecord(**base)
    return StoredFire(node if node is not None else iso(seconds), record)


def history(fires: list[StoredFire], **changes: Any) -> JobHistory:
    base: dict[str, Any] = dict(
        name="tick", spec=spec(), updated_at=iso(0), fires=tuple(fires), eligible_now=True
    )
    base.update(changes)
    return JobHistory(**base)


def now_after(seconds: float) -> datetime:
    """`now` such that the span ends exactly at `seconds`."""
    return at(seconds + GRACE_SECONDS)


def test_every_instant_run_is_clean() -> None:
    result = audit_job(history([fire(s) for s in range(1, 11)]), LIVE, None, now_after(10))
    assert result.expected == 10 and result.ran == 10
    assert result.gaps == [] and result.duplicates == [] and result.clean


def test_a_missing_record_is_a_gap() -> None:
    fires = [fire(s) for s in range(1, 11) if s != 4]
    result = audit_job(history(fires), LIVE, None, now_after(10))
    assert result.gaps == [iso(4)]
    assert not result.clean


def test_instants_at_or_before_the_change_are_not_expected() -> None:
    result = audit_job(
        history([fire(s) for s in range(6, 11)], updated_at=iso(5)), LIVE, None, now_after(10)
    )
    assert result.expected == 5 and result.gaps == []


def test_the_grace_and_the_jitter_end_the_span() -> None:
    fires = [fire(s) for s in range(1, 9)]
    assert audit_job(history(fires), LIVE, None, now_after(8)).clean
    jittery = history(fires, spec=spec(jitter=3.0))
    assert audit_job(jittery, LIVE, None, now_after(11)).clean  # 9..11 may not be due yet
    assert audit_job(jittery, LIVE, None, now_after(12)).gaps == [iso(9)]


def test_a_pruned_history_starts_the_span_at_its_oldest_record() -> None:
    fires = [fire(s) for s in range(50, 71)]  # 21 records >= history 20: older ones pruned
    result = audit_job(history(fires), LIVE, None, now_after(70))
    assert result.expected == 21 and result.clean
    short = [fire(s) for s in range(60, 71)]  # fewer than history: nothing was pruned
    assert audit_job(history(short), LIVE, None, now_after(70)).gaps == [
        iso(s) for s in range(1, 60)
    ]


def test_since_bounds_the_span_inclusively() -> None:
    fires = [fire(s) for s in range(5, 11)]
    result = audit_job(history(fires), LIVE, at(5), now_after(10))
    assert result.expected == 6 and result.clean
    start = span_start(history(fires), at(5))
    assert start is not None and start < at(5)


def test_a_skip_range_covers_every_instant_it_names() -> None:
    skipped = fire(
        8,
        state="skipped",
        skip_reason="outside-catchup-window",
        extra={"covers_from": iso(1), "count": 8},
    )
    result = audit_job(history([skipped, fire(9), fire(10)]), LIVE, None, now_after(10))
    assert result.gaps == [] and result.clean
    assert result.skipped == {"outside-catchup-window": 8}
    assert result.ran == 2


def test_a_skip_range_with_a_bad_start_covers_only_its_own_instant() -> None:
    skipped = fire(3, state="skipped", skip_reason="x", extra={"covers_from": "yesterday"})
    result = audit_job(history([fire(1), fire(2), skipped]), LIVE, None, now_after(4))
    assert result.gaps == [iso(4)]
    assert any("covers_from" in p for p in result.problems)


def test_a_record_claiming_a_recorded_instant_is_a_duplicate() -> None:
    planted = fire(3, node=iso(3) + "-planted")
    result = audit_job(history([fire(1), fire(2), fire(3), planted]), LIVE, None, now_after(3))
    assert result.duplicates == [iso(3)]
    assert any("claims instant" in p for p in result.problems)
    assert not result.clean


def test_a_record_under_another_instant_covers_its_node_and_claims_its_instant() -> None:
    moved = fire(2, node=iso(3))  # node says 3, record says 2: both are covered, 2 twice
    result = audit_job(history([fire(1), fire(2), moved]), LIVE, None, now_after(3))
    assert result.gaps == [] and result.duplicates == [iso(2)]


def test_running_records_of_dead_sessions_are_abandoned() -> None:
    fires = [fire(1), fire(2, state="running", session=99), fire(3, state="running")]
    result = audit_job(history(fires), LIVE, None, now_after(3))
    assert result.abandoned == [iso(2)]
    assert result.runs == [iso(1), iso(3)]
    assert result.gaps == []  # an abandoned claim still covers its instant
    assert not result.clean


def test_triggers_are_runs_not_expected_instants() -> None:
    fires = [fire(2), fire(3, kind="trigger"), fire(4)]
    every_other = history(fires, spec=spec(schedule="*/2 * * * * *"))
    result = audit_job(every_other, LIVE, None, now_after(4))
    assert result.ran == 3 and result.expected == 2 and result.clean


def test_unreadable_records_cover_their_node_and_are_problems() -> None:
    result = audit_job(history([fire(1), StoredFire(iso(2), None)]), LIVE, None, now_after(2))
    assert result.gaps == []
    assert result.problems == [f"unreadable fire record {iso(2)!r}"]


def test_records_after_the_span_are_not_counted_as_runs_yet() -> None:
    """`RAN 66, EXPECTED 64`: runs inside the grace were counted, their instants were not."""
    result = audit_job(history([fire(1), fire(2), fire(3), fire(4)]), LIVE, None, now_after(2))
    assert result.runs == [iso(1), iso(2)] and result.expected == 2 and result.clean
    doubled = [fire(1), fire(2), fire(4), fire(4, node=iso(4) + "x")]  # claimed twice
    assert audit_job(history(doubled), LIVE, None, now_after(2)).duplicates == [iso(4)]


def test_a_record_from_the_future_is_a_problem_and_counts_for_nothing() -> None:
    """Issue 19: one record named years ahead made its job's new owner skip a thousand
    instants that had not happened; the daemons now ignore it, and the audit reports it."""
    now = now_after(3)
    ahead = now + timedelta(days=3 * 365)
    node = format_utc(ahead)
    future = StoredFire(node, fire(0, scheduled=node, claimed_at=node).record)
    near = fire(5)  # within the clocks' margin of now: an ordinary record
    result = audit_job(history([fire(1), fire(2), fire(3), near, future]), LIVE, None, now)
    assert result.problems == [f"fire record {node!r} is from the future: the daemons ignore it"]
    assert result.runs == [iso(1), iso(2), iso(3)] and result.gaps == []  # 5: after the span


def test_records_with_wrong_field_types_count_as_unreadable() -> None:
    odd = [fire(2, extra=[1]), fire(3, session=[7]), fire(4, scheduled=4)]
    result = audit_job(history([fire(1), *odd]), LIVE, None, now_after(4))
    assert result.gaps == [] and len(result.problems) == 3


def test_paused_jobs_expect_nothing_and_invalid_ones_are_problems() -> None:
    paused = audit_job(history([], spec=spec(paused=True)), LIVE, None, now_after(100))
    assert paused.expected == 0 and paused.clean
    broken = audit_job(history([], spec=None, error="bad schedule"), LIVE, None, now_after(100))
    assert broken.problems == ["job disabled: bad schedule"]


def test_no_eligible_member_is_flagged() -> None:
    result = audit_job(history([fire(1)], eligible_now=False), LIVE, None, now_after(1))
    assert result.problems == ["no eligible member now: nothing runs this job"]


def test_huge_spans_are_truncated_and_say_so() -> None:
    result = audit_job(history([]), LIVE, None, at(200_000))
    assert result.expected == 100_000
    assert any("truncated" in p for p in result.problems)


def test_report_json_shape_and_totals() -> None:
    clean = history([fire(s) for s in range(1, 4)])
    gappy = history([fire(1, job="other")], name="other")
    report = audit_cluster([gappy, clean], LIVE, None, now_after(3))
    data = report.to_json()
    assert set(data) >= {"since", "until", "clean", "jobs", "totals"}
    assert [j["name"] for j in data["jobs"]] == ["other", "tick"]
    for job in data["jobs"]:
        assert set(job) >= {
            "name",
            "ran",
            "expected",
            "gaps",
            "duplicates",
            "abandoned",
            "skipped",
            "problems",
        }
    assert data["totals"]["gaps"] == 2 and data["totals"]["ran"] == 4
    assert data["clean"] is False
    assert data["until"] == iso(3)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 10)), max_size=12),
    st.lists(st.integers(0, 60), max_size=40),
)
def test_coverage_matches_a_brute_force_oracle(
    ranges: list[tuple[int, int]], probes: list[int]
) -> None:
    fires = [
        fire(end, state="skipped", skip_reason="r", extra={"covers_from": iso(end - length)})
        for end, length in ranges
    ]
    intervals = covered_intervals(tuple(fires))
    instants = sorted({at(p) for p in probes})
    oracle = [
        t for t in instants if not any(at(end - length) <= t <= at(end) for end, length in ranges)
    ]
    assert uncovered(instants, intervals) == oracle


@settings(max_examples=100, deadline=None)
@given(st.sets(st.integers(1, 40)), st.sets(st.integers(1, 40)))
def test_gaps_are_exactly_the_unrecorded_instants(recorded: set[int], doubled: set[int]) -> None:
    fires = [fire(s) for s in recorded]
    fires += [fire(s, node=iso(s) + "-x") for s in doubled & recorded]
    result = audit_job(history(fires, spec=spec(history=1000)), LIVE, None, now_after(40))
    assert result.gaps == [iso(s) for s in range(1, 41) if s not in recorded]
    assert result.duplicates == [iso(s) for s in sorted(doubled & recorded)]
    assert result.clean == (len(recorded) == 40 and not doubled & recorded)
