"""The fire thread's owner table (`OwnerChain`): a member waiting to join weighs every job
with itself beforehand, so that joining is one weight per job, not the whole table while its
share waits; what it then owns is what a table built from scratch says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from unittest import mock

from tests.fire_shell import spec
from zksched.core import owners
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.runtime.membership import ClusterView, OwnerChain
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
    assert chain.follow(waiting, None) is None
    chain.weigh_before_joining(waiting, JOBS, ready)
    chain.weigh_before_joining(waiting, JOBS, ready)  # once: a second call queues nothing
    assert steps.run_all() == 7  # 2,000 jobs in slices of 300
    ready.assert_called_once_with()

    joined_me = replace(ME, znode="new-900.0000000042")
    calls, patch = counting_weights()
    with patch:
        moved = chain.follow(view([*OTHERS, joined_me], joined_me.znode, None), waiting)
        table = chain.table
        mine = {n for n, s in JOBS.items() if table.job_owner(n, s) == ME.member_id}
    assert moved is None  # it joined: every job is looked at (from the memo)
    assert calls[0] <= 2 * len(JOBS)  # not jobs x members (42,000)
    scratch = OwnerTable([*OTHERS, joined_me])
    assert mine == {n for n, s in JOBS.items() if scratch.job_owner(n, s) == ME.member_id}
    assert mine  # its share, labelled jobs included


def test_a_member_that_joins_unweighed_weighs_every_member_for_every_job() -> None:
    """What the weighing spares (the control for the test above)."""
    chain = OwnerChain(SkipLog(), None, Steps().post, 300)
    joined_me = replace(ME, znode="new-900.0000000042")
    calls, patch = counting_weights()
    with patch:
        chain.follow(view([*OTHERS, joined_me], joined_me.znode, None), None)
        for name, job in JOBS.items():
            chain.table.job_owner(name, job)
    unlabelled = sum(1 for job in JOBS.values() if not job.labels)
    assert calls[0] >= unlabelled * (len(OTHERS) + 1)  # the labelled: one eligible member


def test_a_membership_change_while_weighing_keeps_the_weighed_and_the_result_right() -> None:
    steps, ready = Steps(), mock.Mock()
    chain = OwnerChain(SkipLog(), None, steps.post, 300)
    waiting = view(OTHERS, None, ME)
    chain.follow(waiting, None)
    chain.weigh_before_joining(waiting, JOBS, ready)
    steps.queued.pop(0)(0.0)  # a slice, then a member leaves and one joins
    changed = [*OTHERS[1:], Member("late-7", znode="late-7.0000000099")]
    chain.follow(view(changed, None, ME), waiting)
    steps.run_all()
    ready.assert_called_once_with()
    joined_me = replace(ME, znode="new-900.0000000142")
    chain.follow(view([*changed, joined_me], joined_me.znode, None), view(changed, None, ME))
    scratch = OwnerTable([*changed, joined_me])
    assert all(chain.table.job_owner(n, s) == scratch.job_owner(n, s) for n, s in JOBS.items())


def test_no_weighing_without_a_joining_record() -> None:
    steps, ready = Steps(), mock.Mock()
    chain = OwnerChain(SkipLog(), None, steps.post, 300)
    joined_me = replace(ME, znode="new-900.0000000042")
    active = view([*OTHERS, joined_me], joined_me.znode, None)
    chain.follow(active, None)
    chain.weigh_before_joining(active, JOBS, ready)
    chain.weigh_before_joining(None, JOBS, ready)
    assert not steps.queued and not ready.called
