"""The fire shell's lease and folder work against a real server (zksched/runtime/fire/leases.py,
zk_actions.py; zksched/zk/leases.py): first fires' folders made together before their leases,
and leases given back together deleted in one transaction, each node still deleted when one
of them is gone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from integration.harness import wait_until
from tools.bench.zk_requests import RequestCounter
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.runtime.clock import Clock
from zksched.runtime.fire.zk_actions import ZkActions
from zksched.runtime.host import ThreadHost
from zksched.zk.fire_stores import ZkFireStores
from zksched.zk.paths import ClusterPaths

JOBS = [f"job-{i}" for i in range(5)]


class Answers:
    """What the shell posts back to the core, by job."""

    def __init__(self) -> None:
        self.events: dict[str, list[m.JobEvent]] = {}
        self._mutex = threading.Lock()

    def post(self, job: str, event: m.JobEvent) -> None:
        with self._mutex:
            self.events.setdefault(job, []).append(event)

    def taken(self, jobs: list[str]) -> bool:
        with self._mutex:
            return all(
                any(
                    isinstance(e, m.LeaseAnswered) and e.outcome is m.LeaseOutcome.TAKEN
                    for e in self.events.get(job, [])
                )
                for job in jobs
            )


def fire_io(client: KazooClient, client_id: str, answers: Answers) -> ZkActions:
    stores = ZkFireStores(client, ClusterPaths(client_id), "m-1", 3.0)
    return ZkActions(stores, "m-1", ThreadHost(Clock()), answers.post)


Taken = tuple[ZkActions, KazooClient, Answers]


@pytest.fixture
def taken(zk_client: Callable[..., KazooClient], zk: str, client_id: str) -> Iterator[Taken]:
    """A ZkActions of its own session that has taken the lease of every job in JOBS."""
    client = zk_client(zk, session_timeout=4.0)
    answers = Answers()
    io = fire_io(client, client_id, answers)
    io.take_leases([(job, 0.0, n) for n, job in enumerate(JOBS, 1)], client.client_id[0])
    try:
        wait_until(lambda: answers.taken(JOBS), 10, what="every lease taken")
        yield io, client, answers
    finally:
        io.close()


def test_first_fires_get_their_folders_together_then_their_leases(
    taken: Taken, kazoo: KazooClient, client_id: str
) -> None:
    io, _client, _answers = taken
    paths = ClusterPaths(client_id)
    for job in JOBS:
        assert kazoo.exists(paths.job_fires(job)), f"no fire folder for {job}"
        assert len(kazoo.get_children(paths.job_lock(job))) == 1
    assert io.leases.folders_known(JOBS)
    # the folders were made here, empty: nothing to list before the job has records
    spec = JobSpec(name=JOBS[0], schedule="* * * * *", command=("true",))
    assert not io.pruner.may_prune(spec)


def every_lock_empty(kazoo: KazooClient, paths: ClusterPaths) -> bool:
    return all(not kazoo.get_children(paths.job_lock(job)) for job in JOBS)


def test_leases_given_back_together_go_in_one_transaction(
    taken: Taken, kazoo: KazooClient, client_id: str
) -> None:
    io, client, _answers = taken
    paths = ClusterPaths(client_id)
    counter = RequestCounter()
    counter.attach(client)
    counter.enabled = True
    for take, job in enumerate(JOBS, 1):
        io.leases.give_back(job, take)
    wait_until(lambda: every_lock_empty(kazoo, paths), 10, what="every lock node deleted")
    counter.enabled = False
    assert counter.counts.get("Delete", 0) < len(JOBS), counter.counts
    assert counter.counts.get("Transaction", 0) >= 1, counter.counts


def test_a_lock_node_gone_already_spoils_none_of_the_others(
    taken: Taken, kazoo: KazooClient, client_id: str
) -> None:
    io, _client, _answers = taken
    paths = ClusterPaths(client_id)
    gone = paths.job_lock(JOBS[2])
    for child in kazoo.get_children(gone):
        kazoo.delete(f"{gone}/{child}")  # by hand: the transaction of all five fails
    for take, job in enumerate(JOBS, 1):
        io.leases.give_back(job, take)
    wait_until(
        lambda: every_lock_empty(kazoo, paths), 10, what="the other lock nodes deleted one by one"
    )
    assert not io.leases.has_chores()  # nothing left over to retry
