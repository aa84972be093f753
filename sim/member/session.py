"""A simulated member's life, session and membership: what zksched's membership loop does.

Boot, crash and SIGTERM; a session with a contact watchdog (no reply for T/3: not
connected; T/2: the session counts as lost); an ephemeral sequential member node; watches on
members, the job table and triggers, re-read when they fire; and what the fire core is told
of it all: the cluster view, the job table, session loss, triggers taken.
"""

from __future__ import annotations

from typing import Any

from sim.member.base import RETRY, MemberBase
from sim.world import ConnectionLoss, expired
from sim.zkmodel import NodeExists, WatchEvent, ZkError, ZkModel
from zksched.core.fire import model as m
from zksched.core.fire.member import MemberFireCore
from zksched.core.jobspec import JobSpec
from zksched.core.members import Member
from zksched.core.owners import OwnerTable


class MemberSession(MemberBase):
    """The member's life and session (a part of `SimMember`)."""

    # -- life -----------------------------------------------------------------------------

    def boot(self) -> None:
        self.alive, self.stopping, self.lost, self.connected = True, False, False, False
        self.core = MemberFireCore(self.core.tunables)
        self.last_heard = self.world.t
        self._open_session()
        self._watchdog()
        self._ping()

    def crash(self) -> None:
        """Dies at once: its commands with it, its session left to expire."""
        self.world.note(self.name, "crash")
        for run in self.runs.values():
            self.ledger.ended(run, self.world.t, "killed")
        self._die()

    def sigterm(self, grace: float) -> None:
        self.world.note(self.name, "sigterm")
        self.stopping = True
        self._act(self.core.stop(self.now()))
        if self.session is not None and self.connected:
            session = self.session

            def leave(zk: ZkModel) -> None:
                for path in zk.ephemerals_of(session):
                    if path.startswith("/members/"):
                        zk.delete(session, path)

            self._call(leave, lambda r: None)
        self.world.after(0.05, self._stop_step, self.world.t + grace)

    def _stop_step(self, give_up: float) -> None:
        if not self.alive:
            return
        if self.runs and self.world.t >= give_up:
            for run in self.runs.values():
                self._terminate(run, "stop grace over")
        if self.runs or (self.core.busy() and self.world.t < give_up + 2.0):
            self.world.after(0.05, self._stop_step, give_up)
            return
        if self.session is not None:
            session = self.session
            self.world.request(self, session, lambda zk: self._close(zk, session), lambda r: None)
        self._die()

    def _close(self, zk: ZkModel, session: int) -> None:
        """The session closed: gone as if expired (its ephemerals go now)."""
        zk.close_session(session)
        self.world.expired_at.setdefault(session, self.world.t)

    def _die(self) -> None:
        self.ledger.died(self.name, self.world.t)
        self.ledger.link(self.name, self.world.t, False)
        self.runs.clear()
        self.alive = False
        self.incarnation += 1
        self.session = None
        self.locks.clear()
        self.taking.clear()
        self.leftovers.clear()

    # -- the session ----------------------------------------------------------------------

    def _open_session(self) -> None:
        timeout, t = self.timeout, self.world.t

        def opened(result: Any) -> None:
            if isinstance(result, ZkError):
                self.world.after(RETRY, self._open_session)
                return
            self.session = result
            self.world.sessions[result] = self
            self.last_heard = self.world.t
            self.world.note(self.name, f"session {result}")
            self._register()

        self.world.request(self, None, lambda zk: zk.open_session(timeout, t), opened)

    def _register(self) -> None:
        session, name = self.session, self.name
        assert session is not None

        def done(result: Any) -> None:
            if isinstance(result, ConnectionLoss):
                # it may have landed: ours are found by their session when we look
                self.world.after(RETRY, self._register_checked)
            elif not isinstance(result, ZkError) or isinstance(result, NodeExists):
                self._refresh()

        self._call(lambda zk: zk.create(session, f"/members/{name}.", b"", True, True, True), done)

    def _register_checked(self) -> None:
        session = self.session
        if session is None or not self.alive:
            return

        def found(result: Any) -> None:
            if isinstance(result, ZkError):
                self.world.after(RETRY, self._register_checked)
            elif result:
                self._refresh()
            else:
                self._register()

        self._call(
            lambda zk: [p for p in zk.ephemerals_of(session) if p.startswith("/members/")], found
        )

    def _contact(self, result: Any) -> None:
        if expired(result):
            if self.session is not None and self.alive and not self.refreshing:
                self.world.note(self.name, "session expired (told on reconnect)")
                self._session_gone()
                self.session = None
                self._open_session()
            return
        self.last_heard = self.world.t
        if not self.connected and not self.refreshing and self.session is not None:
            self._refresh()

    def _session_gone(self) -> None:
        if not self.lost:
            self._act(self.core.session_lost(self.now()))
        self.lost, self.connected = True, False
        self.ledger.link(self.name, self.world.t, False)
        self.locks.clear()
        self.leftovers.clear()

    def _watchdog(self) -> None:
        if not self.alive:
            return
        silence = self.world.t - self.last_heard
        if self.connected and silence > self.timeout / 3:
            self.world.note(self.name, "no contact: not connected")
            self.connected = False
            self.ledger.link(self.name, self.world.t, False)
            self._act(self.core.view_changed(None, self._owns, self.now()))
        if not self.lost and self.session is not None and silence > self.timeout / 2:
            self.world.note(self.name, "no contact: session treated as lost")
            self.lost = True
            self._act(self.core.session_lost(self.now()))
            self.leftovers.update(self.locks.values())
            self.locks.clear()
        self.world.after(self.timeout / 12, self._watchdog)

    def _ping(self) -> None:
        if not self.alive:
            return
        if self.session is not None:
            self._call(lambda zk: None, lambda r: None)
        self.world.after(self.timeout / 6, self._ping)

    def _refresh(self) -> None:
        """Read members, the job table and triggers (with watches), then tell the core."""
        session = self.session
        if session is None:
            return
        self.refreshing = True

        def read(zk: ZkModel) -> tuple[list[str], int, list[str]]:
            members = zk.get_children(session, "/members", watch=True)
            version = int(zk.get(session, "/jobs", watch=True)[0] or b"0")
            triggers = zk.get_children(session, "/triggers", watch=True)
            return members, version, triggers

        def done(result: Any) -> None:
            self.refreshing = False
            if isinstance(result, ZkError):
                if not expired(result) and self.alive:
                    self.world.after(RETRY, self._refresh)
                return
            members, version, triggers = result
            self._set_members(members)
            self._set_table(version)
            if self.lost and self.leftovers:
                self._clear_leftovers()
            was = self.connected
            self.connected, self.lost = True, False
            self.ledger.link(self.name, self.world.t, True)
            if not was:
                self.world.note(self.name, f"connected (session {session})")
            self._act(self.core.view_changed(session, self._owns, self.now()))
            self._take_triggers(triggers)

        self._call(read, done)

    def _set_members(self, names: list[str]) -> None:
        ids = {n.rsplit(".", 1)[0] for n in names}
        labels = self.ledger.labels
        self.owners = OwnerTable(Member(i, labels=labels.get(i, {})) for i in sorted(ids))

    def _set_table(self, version: int) -> None:
        if version != self.table_version:
            self.table_version = version
            self.table = self.ledger.tables[version]
            self._act(self.core.table_changed(self.table, self.now()))

    def _owns(self, job: str, spec: JobSpec) -> bool:
        return self.owners.owner(job, spec.labels) == self.name

    def watch_fired(self, event: WatchEvent) -> None:
        # also while the watchdog has us "not connected": the session is fine, and a watch
        # is one-shot (kazoo calls it back whatever our own view of the connection is)
        if not self.alive or self.session is None:
            return
        session = self.session
        if event.path == "/members":
            self._call(
                lambda zk: zk.get_children(session, "/members", watch=True), self._members_read
            )
        elif event.path == "/jobs":
            self._call(
                lambda zk: int(zk.get(session, "/jobs", watch=True)[0] or b"0"), self._table_read
            )
        elif event.path == "/triggers":
            self._call(
                lambda zk: zk.get_children(session, "/triggers", watch=True), self._take_triggers
            )

    def _reread(self, path: str) -> None:
        """A watch's re-read failed: its watch may not be set either, so read again (kazoo's
        watch recipes retry the same way)."""
        if self.alive and self.session is not None:
            self.watch_fired(WatchEvent(self.session, "changed", path))

    def _members_read(self, result: Any) -> None:
        if isinstance(result, ZkError):
            if not expired(result):
                self.world.after(RETRY, self._reread, "/members")
            return
        self._set_members(result)
        if self.connected:
            self._act(self.core.view_changed(self.session, self._owns, self.now()))

    def _table_read(self, result: Any) -> None:
        if isinstance(result, ZkError):
            if not expired(result):
                self.world.after(RETRY, self._reread, "/jobs")
            return
        self._set_table(result)

    def _take_triggers(self, result: Any) -> None:
        if isinstance(result, ZkError):
            if not expired(result):
                self.world.after(RETRY, self._reread, "/triggers")
            return
        if not self.connected:
            return
        for node in result:
            job = node.rsplit(".", 1)[0]
            entry = self.table.get(job)
            if entry is None or not self._owns(job, entry[0]):
                continue
            self._take_trigger(job, node)

    def _take_trigger(self, job: str, node: str) -> None:
        """Deleting the trigger's node takes it: one member does."""
        session = self.session or 0

        def taken(result: Any) -> None:
            if isinstance(result, ZkError):
                return  # another member took it, or it is looked at again on the next change
            self.ledger.trigger_taken(node, self)
            self._act(self.core.handle(job, m.Triggered(node), self.now()))

        self._call(lambda zk: zk.delete(session, f"/triggers/{node}"), taken)
