"""The job leases' ZooKeeper calls, for the fire shell (runtime/fire/leases.py): a take of a
job's `JobLock` (blocking, up to its wait), lock nodes deleted together, and the contenders
a failed take may have left (kazoo #732) cleared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

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

LeaseTaken = Callable[[LockAttempt, JobLock | None, str | None, bool], None]


class ZkLeases:
    def __init__(
        self, client: KazooClient, paths: ClusterPaths, member_id: str, timeout: float
    ) -> None:
        self._client = client
        self._paths = paths
        self._member_id = member_id
        self._timeout = timeout
        self.registry = HeldLocks()

    def folders_known(self, jobs: list[str]) -> bool:
        return all(self.registry.folder_known(self._paths.job_lock(job)) for job in jobs)

    def ensure_folders(self, jobs: list[str]) -> None:
        """Make the jobs' lock folders not known to exist, pipelined."""
        ensure_lock_folders(self._client, self._paths, jobs, self.registry, self._timeout)

    def acquire(self, job: str, wait: float, session: int, then: LeaseTaken) -> None:
        """Take the job's lock, waiting up to `wait` seconds for its holder to let go (this
        thread waits), then call `then` with the attempt, the lock (ACQUIRED), its holder
        (HELD) and whether a contender of ours may be left behind."""
        lock = JobLock(
            self._client, self._paths, job, self._member_id, session, self._timeout, self.registry
        )
        try:
            attempt = lock.try_acquire(wait)
        except Exception as exc:
            log.warning("lock attempt for %s failed: %s", job, type(exc).__name__)
            attempt = LockAttempt.UNKNOWN
        acquired = attempt is LockAttempt.ACQUIRED
        holder = lock.holder() if attempt is LockAttempt.HELD else None
        then(attempt, lock if acquired else None, holder, lock.may_leave_orphan)

    def delete(self, nodes: list[str], together: bool = True) -> list[str]:
        """Delete lock nodes, `together` in one transaction when there are several (each on
        its own if it does not apply: a node gone is fine). Returns those not deleted."""
        if together and len(nodes) > 1:
            txn = self._client.transaction()
            for node in nodes:
                txn.delete(node)
            try:
                results = wait(txn.commit_async(), self._timeout)
                if not any(isinstance(r, Exception) for r in results):
                    return []
            except Exception:  # unknown: each on its own below
                pass
        kept = []
        pending = [(n, self._client.delete_async(n)) for n in nodes]
        for node, result in pending:
            try:
                wait(result, self._timeout)
            except NoNodeError:
                pass  # gone already (with its session, or by hand)
            except Exception:  # kept: a node of a live session would block the job
                kept.append(node)
        return kept

    def clear_orphans(self, job: str) -> bool:
        """Delete this session's contenders for `job` that no lock here holds or tries; True
        once none is left."""
        path = self._paths.job_lock(job)
        tag = member_tag(self._member_id)
        return clear_orphans(self._client, path, tag, self.registry, self._timeout)
