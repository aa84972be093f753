"""Which pending triggers a member takes, and in what order (membership/trigger_intake.py)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from zksched.runtime.membership.job_watch import Trigger
from zksched.runtime.membership.trigger_intake import TriggerIntake


def intake(taken: list[str], triggered: list[Trigger]) -> TriggerIntake:
    def take(znode: str) -> bool:
        taken.append(znode)
        return not znode.endswith("lost")  # another member deleted it first

    def run_now(call: Any, *args: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(call(*args))
        return done

    return TriggerIntake(take, triggered.append, run_now)


def test_a_flood_of_one_job_s_triggers_delays_no_other_job_s() -> None:
    """20,000 trigger nodes of one job held `jobs trigger` of every other job for half a
    minute: they were taken first in, first out."""
    flood = [Trigger(f"flood.{i:010d}", "flood") for i in range(1000)]
    taken: list[str] = []
    triggered: list[Trigger] = []
    intake(taken, triggered).offer(
        [*flood, Trigger("other.0000000001", "other")], frozenset({"flood", "other"})
    )
    assert taken[:2] == ["flood.0000000000", "other.0000000001"]
    assert len(taken) == 1001 and [t.job for t in triggered].count("other") == 1


def test_only_owned_jobs_triggers_are_taken_and_a_lost_race_runs_nothing() -> None:
    taken: list[str] = []
    triggered: list[Trigger] = []
    pending = [Trigger("a.1", "a"), Trigger("b.1", "b"), Trigger("a.2lost", "a")]
    intake(taken, triggered).offer(pending, frozenset({"a"}))
    assert taken == ["a.1", "a.2lost"] and triggered == [Trigger("a.1", "a")]
