"""The job locks this member holds across fires: one per `overlap = "skip"` job it owns.

Every run of such a job happens under the job's kazoo Lock (zksched/zk/locks.py), as
before; what changed is how long the lock is held. Taking it for each fire cost three
ZooKeeper requests and two round trips on the fire's critical path, and releasing it a
fourth. A member now keeps the lock of a job it owns between fires when the next fire is
near (`LINGER`), and the scheduler takes it ahead of a fire (`prepare`), so a fire of a
frequent job costs its claim and its result only.

What the lock guarantees does not change: a job runs only under its lock, so a new owner
cannot start the job while the previous owner's run goes on (it skips with
`still-running`, as before), and ZooKeeper releases the lock with the session of a member
that dies. A member gives the lock back as soon as it stops owning the job (a member
joined, the job moved, a graceful stop), or when the run ends if the next fire is far off.
Within this member, "the previous run is still going" is known without asking ZooKeeper:
the lease is busy from the moment a fire takes it until its run is recorded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zksched.runtime.results import MAX_HOLD
from zksched.zk.connection import wait as wait_result
from zksched.zk.locks import HeldLocks, JobLock, LockAttempt, clear_orphans, member_tag
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

LINGER = 60.0  # keep the lock after a run when the job's next fire is at most this far off
# Take the lock this long before a fire (scheduler), off the fire's critical path: long
# enough for a burst of thousands of jobs due at one instant to be prepared in time.
LEAD = 10.0
# how much longer than a ZooKeeper call a fire waits for its job's lock on its way back: the
# result write before it may wait up to results.MAX_HOLD behind fires due together
ENDING_SLACK = MAX_HOLD + 1.0


class JobLeases:
    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        member_id: str,
        call_timeout: float,
    ) -> None:
        self._client = client
        self._paths = paths
        self._member_id = member_id
        self._timeout = call_timeout
        self.registry = HeldLocks()
        self._cv = threading.Condition()
        self._held: dict[str, JobLock] = {}
        self._busy: set[str] = set()  # jobs whose lease a fire is using (or acquiring)
        self._acquiring: set[str] = set()  # busy because their lock is being taken now
        # busy because their run is over and the lock goes back once the result is written
        self._ending: set[str] = set()
        self._lost_busy: dict[str, str] = {}  # lock nodes of a lost session, still in use
        self._owned: frozenset[str] = frozenset()  # jobs whose locks are worth keeping
        # lock nodes of a session we stopped trusting, to delete if it lived on after all
        self._leftovers: list[str] = []
        # jobs whose failed lock attempt may have left a contender of ours behind (its create
        # landed, the reply was lost) that could not be deleted then: it would block the job
        # on every member for as long as this session lives, and this member may never try
        # the job's lock again (the job moved away), so it is cleared from here
        self._orphan_checks: set[str] = set()
        self._orphan_passes = 0  # release_unowned passes with orphans to check (rotation)
        self._closing = False

    # -- for the fire path ------------------------------------------------------------------

    def take(
        self, job: str, session_id: int, wait: float = 0.25, remote_wait: float | None = None
    ) -> tuple[LockAttempt, JobLock | None]:
        """The job's lock for one fire, held until `give_back`. HELD: the lock is held, by
        another member (the lock is returned, to name its holder; `remote_wait` seconds
        were waited, default `wait`) or here (None: our own previous run, still going after
        `wait` seconds); UNKNOWN: the attempt failed on the connection."""
        stale: JobLock | None = None
        with self._cv:
            if not self._cv.wait_for(lambda: job not in self._busy, wait):
                if job not in self._acquiring and job not in self._ending:
                    return LockAttempt.HELD, None
                # The lock is being taken ahead of this fire (`prepare`), or our previous
                # run is over and its lock goes back once its result is written (a catch-up's
                # next instant comes right after the last): nothing runs, so this is no
                # `still-running`. Unknown if it takes longer than ZooKeeper calls may.
                settle = self._timeout + wait + (ENDING_SLACK if job in self._ending else 0)
                if not self._cv.wait_for(lambda: job not in self._busy, settle):
                    return LockAttempt.UNKNOWN, None
            self._busy.add(job)
            lease = self._held.get(job)
            if lease is not None and self._usable(lease, session_id):
                return LockAttempt.ACQUIRED, lease
            self._acquiring.add(job)
            if lease is not None:
                stale = self._held.pop(job)
        if stale is not None:
            # lost, or of an older session: never reused (kazoo #282)
            self._release_all([stale])
        lock = self._new_lock(job, session_id)
        orphan = False
        try:
            attempt = lock.try_acquire(wait if remote_wait is None else remote_wait)
            orphan = lock.may_leave_orphan
        except Exception as exc:  # incl. errors kazoo's connection loop surfaces
            log.warning("lock attempt for %s failed: %s", job, type(exc).__name__)
            attempt, orphan = LockAttempt.UNKNOWN, True
        with self._cv:
            self._acquiring.discard(job)
            if attempt is LockAttempt.ACQUIRED:
                self._held[job] = lock
            else:
                self._busy.discard(job)
            if orphan and attempt is not LockAttempt.ACQUIRED:
                self._orphan_checks.add(job)
            self._cv.notify_all()
        return attempt, lock

    def take_if_held(self, job: str, session_id: int) -> JobLock | None:
        """The job's lock for one fire if this member holds it and no fire uses it; else
        None, without waiting or asking ZooKeeper (then `take` it)."""
        with self._cv:
            lease = self._held.get(job)
            if job in self._busy or lease is None or not self._usable(lease, session_id):
                return None
            self._busy.add(job)
            return lease

    def in_use(self, job: str) -> bool:
        """A fire of the job uses its lock now (not merely being taken ahead: `take` waits
        for that one)."""
        with self._cv:
            return job in self._busy and job not in self._acquiring

    def take_given_back(
        self, jobs: Iterable[str], session_id: int, wait: float
    ) -> dict[str, JobLock]:
        """The locks of `jobs` held here whose fires give them back within `wait` seconds,
        each taken for one fire (as `take_if_held`), waited for all at once; the jobs left
        out are still in use, or their locks were let go of."""
        deadline = time.monotonic() + wait
        pending = set(jobs)
        taken: dict[str, JobLock] = {}
        with self._cv:
            while True:
                for job in [j for j in pending if j not in self._busy]:
                    pending.discard(job)
                    lease = self._held.get(job)
                    if lease is not None and self._usable(lease, session_id):
                        self._busy.add(job)
                        taken[job] = lease
                remaining = deadline - time.monotonic()
                if not pending or remaining <= 0:
                    return taken
                self._cv.wait(remaining)

    def ending(self, job: str) -> None:
        """The job's run is over; its lock will be released (`release_many`) once its result
        is written. Until then a fire of the job waits for it instead of reporting it held."""
        with self._cv:
            if job in self._busy:
                self._ending.add(job)

    def give_back(self, job: str, lock: JobLock, keep: bool) -> None:
        """The fire is over. keep=False: the caller released `lock` (or it is gone). A lock
        kept for a job this member stopped owning meanwhile is released here."""
        with self._cv:
            self._busy.discard(job)
            self._ending.discard(job)
            release = keep and (self._closing or job not in self._owned)
            if (not keep or release) and self._held.get(job) is lock:
                del self._held[job]
            lost_node = self._lost_busy.pop(job, None)
            if lost_node is not None:  # its run is over: delete it if the session lived on
                self._leftovers.append(lost_node)
            self._cv.notify_all()
        if release and lock.held:
            self._release_all([lock])

    def release_many(self, locks: list[tuple[str, JobLock]]) -> None:
        """Fires are over and their jobs' locks not worth keeping: delete the nodes,
        pipelined (kept and retried if that fails), then give the jobs back."""
        with self._cv:
            for job, lock in locks:
                if self._held.get(job) is lock:
                    del self._held[job]
        try:
            self._release_all([lock for _, lock in locks])
        finally:  # whatever happened, the jobs are free for their next fires
            for job, lock in locks:
                self.give_back(job, lock, keep=False)

    @property
    def closing(self) -> bool:
        return self._closing

    # -- for the scheduler ---------------------------------------------------------------------

    def ready(self, job: str, session_id: int | None) -> bool:
        """Held and usable now (or a fire is using it): nothing to prepare."""
        with self._cv:
            lease = self._held.get(job)
            return job in self._busy or (
                lease is not None and session_id is not None and self._usable(lease, session_id)
            )

    def prepare(self, job: str, session_id: int) -> None:
        """Take the lock ahead of the job's next fire (a pool thread; failures are fine:
        the fire tries again itself). Not for a job this member stopped owning meanwhile:
        a member that owned a thousand jobs for a moment (alone at start, before the others
        joined) kept their locks, taken after the fact, until every take was done."""
        with self._cv:
            if self._closing or job not in self._owned:
                return
        attempt, lock = self.take(job, session_id, wait=0.0)
        if attempt is LockAttempt.ACQUIRED and lock is not None:
            self.give_back(job, lock, keep=True)

    def set_owned(self, owned: Iterable[str]) -> None:
        """The jobs this member owns now (the scheduler, on every change; cheap)."""
        with self._cv:
            self._owned = frozenset(owned)

    def has_leftovers(self) -> bool:
        with self._cv:
            return bool(self._leftovers or self._orphan_checks)

    def release_unowned(self) -> None:
        """Give back the idle locks of jobs this member no longer owns (busy ones are given
        back when their fire ends), delete leftover nodes, and clear the orphans failed lock
        attempts may have left (called on every ownership change, and every few seconds
        while there are leftovers)."""
        if not self._client.connected:
            return  # kept: released on the next reconcile, or gone with the session
        with self._cv:
            leftovers, self._leftovers = self._leftovers, []
            victims = [
                self._held.pop(job)
                for job in list(self._held)
                if job not in self._owned and job not in self._busy
            ]
            # not beside a node of a lost session that a run still uses: it would go too
            checks = sorted(j for j in self._orphan_checks if j not in self._lost_busy)
        self._release_all(victims, leftovers)
        # one call timeout for the orphans of a pass: while ZooKeeper is slow (or cut off
        # and kazoo has not noticed yet), each check could cost a timeout of its own, and
        # the next pass's give-backs would wait behind them
        budget_ends = time.monotonic() + self._timeout
        tag = member_tag(self._member_id)
        if checks:  # each pass begins elsewhere: slow first ones cannot starve the rest
            self._orphan_passes += 1
            turn = self._orphan_passes % len(checks)
            checks = checks[turn:] + checks[:turn]
        for job in checks:
            if not self._client.connected or time.monotonic() > budget_ends:
                break  # the rest on the next pass
            path = self._paths.job_lock(job)
            # a contender of a lock being taken or held here is in the registry: kept
            if clear_orphans(self._client, path, tag, self.registry, self._timeout):
                with self._cv:
                    self._orphan_checks.discard(job)

    def close(self) -> None:
        """Graceful stop: give back every idle lock now, and each busy one after its run."""
        with self._cv:
            self._closing = True
            victims = [self._held.pop(j) for j in list(self._held) if j not in self._busy]
        self._release_all(victims)

    def session_lost(self) -> None:
        """The session is (treated as) lost: never reuse its locks (kazoo #282). Its nodes
        are gone with it, or, if it turns out to have lived on, deleted once ZooKeeper
        answers, so that they cannot block the job's new owner."""
        with self._cv:
            leases, self._held = self._held, {}
            for job, lease in leases.items():
                node = lease.release_ops()
                lease.released()  # forgotten: its tag no longer shields it from orphan cleanup
                if node is None:
                    continue
                if job in self._busy:  # a run still uses it: deleted when that run ends
                    self._lost_busy[job] = node
                else:
                    self._leftovers.append(node)

    def held_jobs(self) -> list[str]:
        with self._cv:
            return sorted(self._held)

    # -- internals ------------------------------------------------------------------------------

    def _new_lock(self, job: str, session_id: int) -> JobLock:
        return JobLock(
            self._client,
            self._paths,
            job,
            self._member_id,
            session_id,
            self._timeout,
            self.registry,
        )

    @staticmethod
    def _usable(lease: JobLock, session_id: int) -> bool:
        return lease.held and not lease.lost and lease.session_id == session_id

    def _release_all(self, locks: list[JobLock], nodes: list[str] | None = None) -> None:
        """Delete the lock nodes pipelined (a handover may give back thousands at once).
        Sequential node names are never reused, so a node of ours is only ever ours."""
        paths = list(nodes or [])
        for lock in locks:
            node = lock.release_ops()
            lock.released()
            if node is not None:
                paths.append(node)
        pending = []
        undone: list[str] = []
        for node in paths:
            if self._client.connected:
                pending.append((node, self._client.delete_async(node)))
            else:
                undone.append(node)
        for node, result in pending:
            try:
                wait_result(result, self._timeout)
            except NoNodeError:
                pass  # gone already (with its session, or by hand)
            except Exception as exc:
                log.debug("giving back lock %s failed (%s); will retry", node, type(exc).__name__)
                undone.append(node)
        if undone:  # kept until deleted: a node of a live session would block the job
            with self._cv:
                self._leftovers.extend(undone)
