"""The job leases for the fire core: taking a job's lock, giving it back, and tidying what a
lost session or a failed take left behind (the ZooKeeper calls: `LeaseStore`, stores.py).

Answers: TAKEN; BUSY (another contender after the wait the core allowed, with whether the
job's newest record says a run is going); UNKNOWN (the attempt failed on the connection).
A lock that vanishes while held is reported (`LeaseGone`). After a session is given up
for lost its locks are never reused (kazoo #282): their nodes, if it lived on, are deleted
once ZooKeeper answers, and so are contenders a failed take may have left (kazoo #732).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable

from zksched.core.fire import model as m
from zksched.runtime.fire.stores import HeldLease, LeaseStore
from zksched.runtime.fire.tuning import RELEASE_BATCH
from zksched.runtime.host import Executor
from zksched.zk.locks import LockAttempt

log = logging.getLogger("zksched.fire")


class LeaseIO:
    def __init__(
        self,
        store: LeaseStore,
        lockers: Executor,
        post: Callable[[str, m.JobEvent], None],
        holder_runs: Callable[[str], bool],
    ) -> None:
        """`lockers`: where takes run (a take waits for other holders)."""
        self._store = store
        self._lockers = lockers
        self._post = post
        self._holder_runs = holder_runs
        self._mutex = threading.Lock()
        self._locks: dict[tuple[str, int], HeldLease] = {}  # (job, take) -> held lock
        self._leftovers: list[str] = []  # lock nodes to delete once connected
        self._orphans: set[str] = set()  # jobs whose failed take may have left a contender
        self._releasing: list[HeldLease] = []  # given back, their nodes not deleted yet
        self._release_queued = False

    def folders_known(self, jobs: list[str]) -> bool:
        return self._store.folders_known(jobs)

    def ensure_folders(self, jobs: list[str]) -> None:
        """Make the jobs' lock folders not known to exist (blocks: a pool thread)."""
        self._store.ensure_folders(jobs)

    def take(self, job: str, wait: float, take: int, session: int) -> None:
        then = functools.partial(self._taken, job, take)
        with contextlib.suppress(RuntimeError):  # shut down: we are stopping, taking nothing
            self._lockers.submit(self._guard, self._store.acquire, job, wait, session, then)

    def _taken(
        self,
        job: str,
        take: int,
        attempt: LockAttempt,
        lock: HeldLease | None,
        holder: str | None,
        may_leave_orphan: bool,
    ) -> None:
        if attempt is LockAttempt.ACQUIRED and lock is not None:
            with self._mutex:
                self._locks[job, take] = lock
            lock.on_lost(lambda: self._post(job, m.LeaseGone(take)))
            self._post(job, m.LeaseAnswered(m.LeaseOutcome.TAKEN, take))
            return
        if may_leave_orphan or attempt is LockAttempt.UNKNOWN:
            with self._mutex:
                self._orphans.add(job)
        if attempt is LockAttempt.HELD:
            running = self._holder_runs(job)
            self._post(job, m.LeaseAnswered(m.LeaseOutcome.BUSY, take, holder, running))
        else:
            self._post(job, m.LeaseAnswered(m.LeaseOutcome.UNKNOWN, take))

    def give_back(self, job: str, take: int) -> None:
        """Give up the lock that `take` got. Locks given back together (a burst's runs
        ending) are deleted together: one transaction of up to `RELEASE_BATCH` nodes."""
        with self._mutex:
            lock = self._locks.pop((job, take), None)
        if lock is None:
            return
        lock.on_lost(None)
        with self._mutex:
            self._releasing.append(lock)
            if self._release_queued:
                return
            self._release_queued = True
        with contextlib.suppress(RuntimeError):  # shut down: the session takes the nodes
            self._lockers.submit(self._guard, self._release_all)

    def _release_all(self) -> None:
        with self._mutex:
            locks, self._releasing = self._releasing, []
            self._release_queued = False
        nodes = []
        for lock in locks:
            node = lock.release_ops()
            lock.released()
            if node is not None:
                nodes.append(node)
        for start in range(0, len(nodes), RELEASE_BATCH):
            self._delete(nodes[start : start + RELEASE_BATCH])

    def _delete(self, nodes: list[str], together: bool = True) -> None:
        # kept: a node of a live session would block the job
        kept = self._store.delete(nodes, together)
        if kept:
            with self._mutex:
                self._leftovers.extend(kept)

    def session_lost(self) -> None:
        """Never reuse a lost session's locks (kazoo #282); their nodes are gone with it,
        or, if it lived on, deleted once ZooKeeper answers."""
        with self._mutex:
            locks, self._locks = self._locks, {}
        for lock in locks.values():
            lock.on_lost(None)
            node = lock.release_ops()
            lock.released()
            if node is not None:
                with self._mutex:
                    self._leftovers.append(node)

    def tidy(self) -> None:
        """Delete leftover lock nodes and orphaned contenders (called while connected)."""
        with self._mutex:
            nodes, self._leftovers = self._leftovers, []
            held = {job for job, _ in self._locks}
            jobs = sorted(j for j in self._orphans if j not in held)
        if nodes:
            self._delete(nodes, together=False)
        for job in jobs:
            if self._store.clear_orphans(job):
                with self._mutex:
                    self._orphans.discard(job)

    def has_chores(self) -> bool:
        with self._mutex:
            return bool(self._leftovers or self._orphans)

    def close(self) -> None:
        self._lockers.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _guard(fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("lease I/O failed unexpectedly")
