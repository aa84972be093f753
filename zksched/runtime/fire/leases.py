"""The job leases' ZooKeeper side: taking a job's kazoo Lock for the fire core, giving it
back, and tidying what a lost session or a failed take left behind.

Answers: TAKEN; BUSY (another contender after the wait the core allowed, with whether the
job's newest record says a run is going); UNKNOWN (the attempt failed on the connection).
A lock that vanishes while held is reported (`LeaseGone`). After a session is given up
for lost its locks are never reused (kazoo #282): their nodes, if it lived on, are deleted
once ZooKeeper answers, and so are contenders a failed take may have left (kazoo #732).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zksched.core.fire import model as m
from zksched.runtime.fire.tuning import LOCK_THREADS, RELEASE_BATCH
from zksched.zk.connection import wait
from zksched.zk.locks import (
    HeldLocks,
    JobLock,
    LockAttempt,
    clear_orphans,
    ensure_lock_folders,
    member_tag,
)
from zksched.zk.paths import ClusterPaths

log = logging.getLogger("zksched.fire")


class LeaseIO:
    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        member_id: str,
        call_timeout: float,
        post: Callable[[str, m.JobEvent], None],
        holder_runs: Callable[[str], bool],
    ) -> None:
        self._client = client
        self._paths = paths
        self._member_id = member_id
        self._timeout = call_timeout
        self._post = post
        self._holder_runs = holder_runs
        self._lockers = ThreadPoolExecutor(LOCK_THREADS, thread_name_prefix="zksched-lock")
        self._mutex = threading.Lock()
        self._locks: dict[tuple[str, int], JobLock] = {}  # (job, take) -> held lock
        self._leftovers: list[str] = []  # lock nodes to delete once connected
        self._orphans: set[str] = set()  # jobs whose failed take may have left a contender
        self._releasing: list[JobLock] = []  # given back, their nodes not deleted yet
        self._release_queued = False
        self.registry = HeldLocks()

    def folders_known(self, jobs: list[str]) -> bool:
        return all(self.registry.folder_known(self._paths.job_lock(job)) for job in jobs)

    def ensure_folders(self, jobs: list[str]) -> None:
        """Make the jobs' lock folders not known to exist, pipelined (blocks: a pool thread)."""
        ensure_lock_folders(self._client, self._paths, jobs, self.registry, self._timeout)

    def take(self, job: str, wait: float, take: int, session: int) -> None:
        with contextlib.suppress(RuntimeError):  # shut down: we are stopping, taking nothing
            self._lockers.submit(self._guard, self._take_lease, job, wait, take, session)

    def _take_lease(self, job: str, wait: float, take: int, session: int) -> None:
        lock = JobLock(
            self._client,
            self._paths,
            job,
            self._member_id,
            session,
            self._timeout,
            self.registry,
        )
        try:
            attempt = lock.try_acquire(wait)
        except Exception as exc:
            log.warning("lock attempt for %s failed: %s", job, type(exc).__name__)
            attempt = LockAttempt.UNKNOWN
        if attempt is LockAttempt.ACQUIRED:
            with self._mutex:
                self._locks[job, take] = lock
            lock.on_lost(lambda: self._post(job, m.LeaseGone(take)))
            self._post(job, m.LeaseAnswered(m.LeaseOutcome.TAKEN, take))
            return
        if lock.may_leave_orphan or attempt is LockAttempt.UNKNOWN:
            with self._mutex:
                self._orphans.add(job)
        if attempt is LockAttempt.HELD:
            running = self._holder_runs(job)
            self._post(job, m.LeaseAnswered(m.LeaseOutcome.BUSY, take, lock.holder(), running))
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
            self._delete_together(nodes[start : start + RELEASE_BATCH])

    def _delete_together(self, nodes: list[str]) -> None:
        if len(nodes) > 1:
            txn = self._client.transaction()
            for node in nodes:
                txn.delete(node)
            try:
                results = wait(txn.commit_async(), self._timeout)
                if not any(isinstance(r, Exception) for r in results):
                    return
            except Exception:  # unknown: each on its own below (a node gone is fine)
                pass
        self._delete_nodes(nodes)

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
            self._delete_nodes(nodes)
        tag = member_tag(self._member_id)
        for job in jobs:
            path = self._paths.job_lock(job)
            if clear_orphans(self._client, path, tag, self.registry, self._timeout):
                with self._mutex:
                    self._orphans.discard(job)

    def has_chores(self) -> bool:
        with self._mutex:
            return bool(self._leftovers or self._orphans)

    def _delete_nodes(self, nodes: list[str]) -> None:
        pending = [(n, self._client.delete_async(n)) for n in nodes]
        for node, result in pending:
            try:
                wait(result, self._timeout)
            except NoNodeError:
                pass  # gone already (with its session, or by hand)
            except Exception:  # kept: a node of a live session would block the job
                with self._mutex:
                    self._leftovers.append(node)

    def close(self) -> None:
        self._lockers.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _guard(fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("lease I/O failed unexpectedly")
