"""The fire thread's owner table (`OwnerChain`): a member waiting to join weighs every job
with itself beforehand, so that joining is one weight per job, not the whole table while its
share waits; what it then owns is what a table built from scratch says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from unittest import mock

import pytest

from tests.fire_shell import spec
from zksched.core import owners
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.core.jobtable import JobEntry
from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.runtime.clock import Clock
from zksched.runtime.fire.engine import FireEngine
from zksched.runtime.fire.run_actions import FireSettings
from zksched.runtime.host import ThreadHost
from zksched.runtime.membership import ClusterView, Deriving, JobsSnapshot, OwnerChain
from zksched.runtime.run import CommandRunner
from zksched.runtime.skips import SkipLog

OTHERS = [Member(f"host{i}-{100 + i}", znode=f"host{i}-{100 + i}.{i:010d}") for i in range(20)]
ME = Member("new-900", labels={"zone": "a"})
JOBS: dict[str, JobSpec] = {
    f"job-{i}": spec(name=f"job-{i}", labels={"zone": "a"} if i % 7 == 0 else {})
    for i in range(2000)
}
SESSION = 5


def view(members: list[Member], my_znode: str | None, joining: Member | None) -> ClusterView:
    return ClusterView(True, SESSION, ME.member_id, my_znode, OwnerTable(members), joining)


class Steps:
    """The engine's queue, run by hand."""

    def __init__(self) -> None:
        self.queued: list[Callable[[float], list[m.Action]]] = []

    def post(self, step: Callable[[float], list[m.Action]]) -> None:
        self.queued.append(step)

    def run_all(self) -> int:
        ran = 0
        while self.queued:
            self.queued.pop(0)(0.0)
            ran += 1
        return ran


def counting_weights() -> tuple[list[int], mock._patch[object]]:
    calls = [0]
    real = owners.weight

    def weight(job: str, member_id: str) -> int:
        calls[0] += 1
        return real(job, member_id)

    return calls, mock.patch.object(owners, "weight", weight)


def test_a_weighed_member_joins_with_one_weight_per_job_and_owns_what_scratch_says() -> None:
    steps, ready = Steps(), mock.Mock()
    chain = OwnerChain(SkipLog(), None, steps.post, 300)
    waiting = view(OTHERS, None, ME)
    assert chain.follow(waiting, None, JOBS) is None
    chain.weigh_before_joining(waiting, JOBS, ready)
    chain.weigh_before_joining(waiting, JOBS, ready)  # once: a second call queues nothing
    assert steps.run_all() == 8  # 2,000 jobs in slices of 300, then the join
    ready.assert_called_once_with()

    joined_me = replace(ME, znode="new-900.0000000042")
    calls, patch = counting_weights()
    with patch:
        moved = chain.follow(view([*OTHERS, joined_me], joined_me.znode, None), waiting, JOBS)
        table = chain.table
        mine = {n for n, s in JOBS.items() if table.job_owner(n, s) == ME.member_id}
    assert calls[0] == 0  # its node is new, its record the one weighed: nothing weighed again
    scratch = OwnerTable([*OTHERS, joined_me])
    assert mine == {n for n, s in JOBS.items() if scratch.job_owner(n, s) == ME.member_id}
    assert mine  # its share, labelled jobs included
    assert moved == mine  # what it joined with: its share, not a look at every job


def test_a_weighed_member_joins_only_once_the_fire_core_is_done_aligning() -> None:
    steps, ready, busy = Steps(), mock.Mock(), [True, True, True]
    chain = OwnerChain(SkipLog(), None, steps.post, 5000)
    waiting = view(OTHERS, None, ME)
    chain.follow(waiting, None, JOBS)
    chain.weigh_before_joining(waiting, JOBS, ready, lambda: bool(busy) and busy.pop())
    steps.queued.pop(0)(0.0)  # every job weighed in one slice
    for _ in range(3):  # the core still aligns: asked again each turn, not joined
        steps.queued.pop(0)(0.0)
        assert not ready.called and len(steps.queued) == 1
    steps.run_all()
    ready.assert_called_once_with()


def test_the_engine_joins_after_its_table_is_aligned_and_then_moves_its_share_alone() -> None:
    """Joined while it aligned the table (a slice a turn), the rest of that sweep would come
    after its share, looked at under the new view: at a million jobs, seconds."""
    engine = FireEngine(
        mock.MagicMock(),
        CommandRunner(),
        SkipLog(),
        FireSettings("test", ME.member_id),
        ThreadHost(Clock()),
        align_slice=100,  # 2,000 jobs: 20 turns, the weighing one
    )
    aligning_at_ready: list[bool] = []
    engine.on_ready_to_join = lambda: aligning_at_ready.append(engine.core.aligning)
    stamp = "2026-03-01T00:00:00Z"
    entries = {n: JobEntry(n, s, None, stamp) for n, s in JOBS.items()}
    engine.update_jobs(JobsSnapshot(1, entries))
    waiting = view(OTHERS, None, ME)
    engine.update_view(waiting)
    try:
        for _ in range(40):
            engine.turn(0.0)
        assert aligning_at_ready == [False]
        calls: list[object] = []
        engine.core.view_changed = lambda *args: calls.append(args[3]) or []  # type: ignore[method-assign]
        joined_me = replace(ME, znode="new-900.0000000042")
        engine.update_view(view([*OTHERS, joined_me], joined_me.znode, None))
        engine.turn(0.0)
        scratch = OwnerTable([*OTHERS, joined_me])
        assert calls == [{n for n, s in JOBS.items() if scratch.job_owner(n, s) == ME.member_id}]
    finally:
        engine.stop(0.0)  # its pools and the runner's descriptor


def weighed_while_waiting(
    allowed: tuple[str, ...] | None = None,
) -> tuple[OwnerChain, ClusterView]:
    """A chain that weighed every job of JOBS while waiting to join, and its waiting view."""
    steps = Steps()
    chain = OwnerChain(SkipLog(), allowed, steps.post, 300)
    waiting = view(OTHERS, None, ME)
    chain.follow(waiting, None, JOBS)
    chain.weigh_before_joining(waiting, JOBS, mock.Mock())
    steps.run_all()
    return chain, waiting


def test_a_member_whose_table_changed_while_it_waited_looks_at_every_job_on_joining() -> None:
    chain, waiting = weighed_while_waiting()
    newer = {**JOBS, "late-job": spec(name="late-job")}  # a new snapshot, not all weighed
    joined_me = replace(ME, znode="new-900.0000000042")
    assert chain.follow(view([*OTHERS, joined_me], joined_me.znode, None), waiting, newer) is None


def test_a_weighed_table_is_let_go_once_another_replaced_it() -> None:
    """What was weighed holds the whole job table (a million jobs): kept only while it is
    the table a join could use."""
    chain, waiting = weighed_while_waiting()
    chain.weigh_before_joining(waiting, JOBS, mock.Mock())
    assert chain._weighed is JOBS
    newer = {**JOBS, "late-job": spec(name="late-job")}
    chain.weigh_before_joining(waiting, newer, mock.Mock())
    assert chain._weighed is None


def test_a_table_built_afresh_while_waiting_makes_joining_look_at_every_job() -> None:
    chain, waiting = weighed_while_waiting()
    # a member with an allow-list: the memo's keys mean something else, the table is new
    strict = Member("strict-1", znode="strict-1.0000000077", allowed_commands=("/usr/bin/*",))
    later = view([*OTHERS, strict], None, ME)
    chain.follow(later, waiting, JOBS)
    joined_me = replace(ME, znode="new-900.0000000042")
    assert (
        chain.follow(view([*OTHERS, strict, joined_me], joined_me.znode, None), later, JOBS) is None
    )


def test_a_member_that_joins_unweighed_weighs_every_member_for_every_job() -> None:
    """What the weighing spares (the control for the test above)."""
    chain = OwnerChain(SkipLog(), None, Steps().post, 300)
    joined_me = replace(ME, znode="new-900.0000000042")
    calls, patch = counting_weights()
    with patch:
        chain.follow(view([*OTHERS, joined_me], joined_me.znode, None), None, JOBS)
        for name, job in JOBS.items():
            chain.table.job_owner(name, job)
    unlabelled = sum(1 for job in JOBS.values() if not job.labels)
    assert calls[0] >= unlabelled * (len(OTHERS) + 1)  # the labelled: one eligible member


def test_a_membership_change_while_weighing_keeps_the_weighed_and_the_result_right() -> None:
    steps, ready = Steps(), mock.Mock()
    chain = OwnerChain(SkipLog(), None, steps.post, 300)
    waiting = view(OTHERS, None, ME)
    chain.follow(waiting, None, JOBS)
    chain.weigh_before_joining(waiting, JOBS, ready)
    steps.queued.pop(0)(0.0)  # a slice, then a member leaves and one joins
    changed = [*OTHERS[1:], Member("late-7", znode="late-7.0000000099")]
    chain.follow(view(changed, None, ME), waiting, JOBS)
    steps.run_all()
    ready.assert_called_once_with()
    joined_me = replace(ME, znode="new-900.0000000142")
    moved = chain.follow(
        view([*changed, joined_me], joined_me.znode, None), view(changed, None, ME), JOBS
    )
    scratch = OwnerTable([*changed, joined_me])
    assert all(chain.table.job_owner(n, s) == scratch.job_owner(n, s) for n, s in JOBS.items())
    assert moved == {n for n, s in JOBS.items() if scratch.job_owner(n, s) == ME.member_id}


def test_no_weighing_without_a_joining_record() -> None:
    steps, ready = Steps(), mock.Mock()
    chain = OwnerChain(SkipLog(), None, steps.post, 300)
    joined_me = replace(ME, znode="new-900.0000000042")
    active = view([*OTHERS, joined_me], joined_me.znode, None)
    chain.follow(active, None, JOBS)
    chain.weigh_before_joining(active, JOBS, ready)
    chain.weigh_before_joining(None, JOBS, ready)
    assert not steps.queued and not ready.called


def test_a_member_with_an_allow_list_looks_at_every_job_on_joining() -> None:
    """Its refusals (jobs it would own by labels) come from that look."""
    chain, waiting = weighed_while_waiting(allowed=("/usr/bin/*",))
    joined_me = replace(ME, znode="new-900.0000000042")
    assert chain.follow(view([*OTHERS, joined_me], joined_me.znode, None), waiting, JOBS) is None


JOINED_ME = replace(ME, znode="new-900.0000000042")


def joined_chain(weighed: int = len(JOBS)) -> tuple[Steps, OwnerChain, ClusterView]:
    """A chain (derivations in slices of 500 entries) that followed a view with this member
    joined, its first `weighed` jobs weighed (as the core aligns them); that view."""
    steps = Steps()
    chain = OwnerChain(SkipLog(), None, steps.post, 300, derive_slice=500)
    start = view([*OTHERS, JOINED_ME], JOINED_ME.znode, None)
    chain.follow(start, None, JOBS)
    for name in list(JOBS)[:weighed]:
        chain.table.job_owner(name, JOBS[name])
    return steps, chain, start


def test_a_change_derived_in_slices_holds_the_view_step_until_its_table_is_complete() -> None:
    """The engine's thread goes on between slices (timers, fires); the view's step comes
    again once its table is derived, and then moves what a derivation at once moves."""
    steps, chain, start = joined_chain(1000)  # the core has aligned half the jobs so far
    me, names = JOINED_ME, list(JOBS)
    again: list[ClusterView] = []
    leave = view([*OTHERS[1:], me], me.znode, None)
    assert isinstance(chain.follow(leave, start, JOBS, again.append), Deriving)
    assert chain.deriving and not again
    old = chain.table
    slices = steps.run_all()
    assert slices > 1 and again == [leave] and chain.table is old  # not taken yet
    for name in names[1000:]:  # and the other half before the view's step comes again
        old.job_owner(name, JOBS[name])
    moved = chain.follow(leave, start, JOBS, again.append)
    assert not chain.deriving
    scratch = OwnerTable([*OTHERS[1:], me])
    assert all(chain.table.job_owner(n, s) == scratch.job_owner(n, s) for n, s in JOBS.items())
    had = {n for n, s in JOBS.items() if old.job_owner(n, s) == ME.member_id}
    has = {n for n, s in JOBS.items() if scratch.job_owner(n, s) == ME.member_id}
    assert moved == has - had and moved  # the leaver's jobs this member takes, all of them


def test_views_that_come_during_a_derivation_wait_and_only_the_newest_follows() -> None:
    steps, chain, start = joined_chain()
    me = JOINED_ME
    again: list[ClusterView] = []
    first = view([*OTHERS[1:], me], me.znode, None)
    second = view([*OTHERS[2:], me], me.znode, None)
    newest = view([*OTHERS[3:], me], me.znode, None)
    assert isinstance(chain.follow(first, start, JOBS, again.append), Deriving)
    steps.queued.pop(0)(0.0)  # a slice; then two more views
    assert isinstance(chain.follow(second, start, JOBS, again.append), Deriving)
    assert isinstance(chain.follow(newest, start, JOBS, again.append), Deriving)
    steps.run_all()
    assert again == [first]  # the one under way first: its table is complete
    chain.follow(first, start, JOBS, again.append)
    assert again == [first, newest]  # then the newest only, from the table just taken
    assert isinstance(chain.follow(newest, first, JOBS, again.append), Deriving)
    steps.run_all()
    moved = chain.follow(newest, first, JOBS, again.append)
    scratch = OwnerTable([*OTHERS[3:], me])
    assert all(chain.table.job_owner(n, s) == scratch.job_owner(n, s) for n, s in JOBS.items())
    gained = {n for n, s in JOBS.items() if scratch.job_owner(n, s) == ME.member_id}
    had = {
        n
        for n, s in JOBS.items()
        if OwnerTable(first.table.members).job_owner(n, s) == ME.member_id
    }
    assert moved == gained - had


def test_a_view_followed_at_once_during_a_derivation_is_refused_not_dropped() -> None:
    _steps, chain, start = joined_chain()
    me = JOINED_ME
    leave = view([*OTHERS[1:], me], me.znode, None)
    assert isinstance(chain.follow(leave, start, JOBS, lambda _v: None), Deriving)
    with pytest.raises(RuntimeError):
        chain.follow(view([*OTHERS[2:], me], me.znode, None), start, JOBS)
