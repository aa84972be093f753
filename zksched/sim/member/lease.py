"""The job lease, as kazoo's lock recipe: a sequential contender node per taker, in order.

The lowest contender holds the lease. A contender whose create reply was lost may have
landed: it is found by our session and deleted. A contender that could not be deleted (the
connection was lost) is kept as a leftover, deleted once connected again.
"""

from __future__ import annotations

from typing import Any

from zksched.core.fire import model as m
from zksched.sim.member.base import RETRY, MemberBase
from zksched.sim.records import decode, fires_of
from zksched.sim.world import ConnectionLoss
from zksched.sim.zkmodel import NoNode, ZkError, ZkModel


class JobLease(MemberBase):
    """Taking, holding and giving back job leases (a part of `SimMember`)."""

    def _take_lease(self, job: str, give_up: float) -> None:
        session = self.session or 0
        folder = f"/locks/{job}"
        self.taking.add(job)

        def create(zk: ZkModel) -> str:
            # a contender of ours left by a take whose reply was lost goes first (kazoo's
            # Lock finds its own node by a unique prefix the same way)
            for path in zk.ephemerals_of(session):
                if path.startswith(folder + "/"):
                    zk.delete(session, path)
            return zk.create(session, f"{folder}/{self.name}-", b"", True, True, True)

        def created(result: Any) -> None:
            if isinstance(result, ZkError):
                self.taking.discard(job)
                if isinstance(result, ConnectionLoss):
                    self.world.after(RETRY, self._orphan_check, job)
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.UNKNOWN))
                return
            self._lease_turn(job, result, give_up)

        self._call(create, created)

    def _lease_turn(self, job: str, path: str, give_up: float) -> None:
        session = self.session or 0
        folder = f"/locks/{job}"

        def listed(result: Any) -> None:
            if isinstance(result, ZkError):
                self.taking.discard(job)
                self._delete_lock(path)  # our contender would block the job (kazoo #732)
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.UNKNOWN))
                return
            order = sorted(result, key=lambda n: n.rsplit("-", 1)[1])
            if order and f"{folder}/{order[0]}" == path:
                self.taking.discard(job)
                self.locks[job] = path
                self._event(job, m.LeaseAnswered(m.LeaseOutcome.TAKEN))
            elif self.world.t + 0.1 < give_up:
                self.world.after(0.1, self._lease_turn, job, path, give_up)
            else:
                self.taking.discard(job)
                self._delete_lock(path)
                holder = order[0].rsplit("-", 1)[0] if order else None
                self._call(lambda zk: self._holder_runs(zk, job),
                           lambda r: self._event(job, m.LeaseAnswered(
                               m.LeaseOutcome.BUSY, holder, r is not False)))

        self._call(lambda zk: zk.get_children(session, folder), listed)

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

        def clear(zk: ZkModel) -> None:
            if job in self.taking or job in self.locks:
                return  # taken again since: that take clears what it finds
            for path in zk.ephemerals_of(session):
                if path.startswith(f"/locks/{job}/"):
                    zk.delete(session, path)

        self._call(clear, done)

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
