"""The job lease, as kazoo's lock recipe: a sequential contender node per taker, in order.

The lowest contender holds the lease. A contender whose create reply was lost may have
landed: it is found by our session (held by no take, used by none under way) and deleted.
A contender that could not be deleted (the connection was lost) is kept as a leftover,
deleted once connected again. Every take has an id that its answer echoes."""

from __future__ import annotations

from typing import Any

from sim.member.base import RETRY, MemberBase
from sim.records import decode, fires_of
from sim.world import ConnectionLoss
from sim.zkmodel import NoNode, ZkError, ZkModel
from zksched.core.fire import model as m


class JobLease(MemberBase):
    """Taking, holding and giving back job leases (a part of `SimMember`)."""

    def _take_lease(self, job: str, take: int, give_up: float) -> None:
        session = self.session or 0
        folder = f"/locks/{job}"
        self.taking[job, take] = None

        def create(zk: ZkModel) -> str:
            self._clear_orphans(zk, session, job)  # a lost create's contender goes first
            return zk.create(session, f"{folder}/{self.name}-", b"", True, True, True)

        def created(result: Any) -> None:
            if isinstance(result, ZkError):
                self.taking.pop((job, take), None)
                if isinstance(result, ConnectionLoss):
                    self.world.after(RETRY, self._orphan_check, job)
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.UNKNOWN, take))
                return
            self.taking[job, take] = result
            self._lease_turn(job, take, result, give_up)

        self._call(create, created)

    def _lease_turn(self, job: str, take: int, path: str, give_up: float) -> None:
        session = self.session or 0
        folder = f"/locks/{job}"

        def listed(result: Any) -> None:
            if isinstance(result, ZkError):
                self.taking.pop((job, take), None)
                self._delete_lock(path)  # our contender would block the job (kazoo #732)
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.UNKNOWN, take))
                return
            order = sorted(result, key=lambda n: n.rsplit("-", 1)[1])
            if order and f"{folder}/{order[0]}" == path:
                self.taking.pop((job, take), None)
                self.locks[job, take] = path
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.TAKEN, take))
            elif self.world.t + 0.1 < give_up:
                self.world.after(0.1, self._lease_turn, job, take, path, give_up)
            else:
                self.taking.pop((job, take), None)
                self._delete_lock(path)
                holder = order[0].rsplit("-", 1)[0] if order else None
                self._call(
                    lambda zk: self._holder_runs(zk, job),
                    lambda r: self._event(
                        job, m.LeaseAnswered(m.LeaseOutcome.BUSY, take, holder, r is not False)
                    ),
                )

        self._call(lambda zk: zk.get_children(session, folder), listed)

    def _clear_orphans(self, zk: ZkModel, session: int, job: str) -> None:
        """Delete our contenders for `job` that no take of ours holds or waits with (the
        real shell tells them apart by the tags of its live lock attempts)."""
        live = set(self.locks.values()) | {p for p in self.taking.values() if p is not None}
        for path in zk.ephemerals_of(session):
            if path.startswith(f"/locks/{job}/") and path not in live:
                zk.delete(session, path)

    def _holder_runs(self, zk: ZkModel, job: str) -> bool:
        """Whether the job's newest record says a run is going."""
        session = self.session or 0
        try:
            names = zk.get_children(session, fires_of(job))
        except NoNode:
            return False
        if not names:
            return False
        return decode(zk.get(session, f"{fires_of(job)}/{max(names)}")[0])[0] == "running"

    def _orphan_check(self, job: str) -> None:
        """A contender create whose reply was lost may have landed: ours go, once we can."""
        session = self.session
        if session is None or not self.alive:
            return

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss):
                self.world.after(RETRY, self._orphan_check, job)

        self._call(lambda zk: self._clear_orphans(zk, session, job), done)

    def _delete_lock(self, path: str) -> None:
        session = self.session or 0

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss):
                self.leftovers.add(path)
                self.world.after(RETRY, self._retry_leftovers)

        self._call(lambda zk: zk.delete(session, path), done)

    def _retry_leftovers(self) -> None:
        if self.alive and self.connected:
            self._clear_leftovers()

    def _clear_leftovers(self) -> None:
        for path in list(self.leftovers):
            self.leftovers.discard(path)
            self._delete_lock(path)
