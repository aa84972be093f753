"""A simulated member's life, session and membership: what zksched's daemon and membership
loop do around the fire shell.

Boot, crash and SIGTERM (the daemon's graceful stop, step by step); a session with a
contact watchdog (no reply for T/3: not connected; T/2: the session counts as lost); an
ephemeral sequential member node; watches on members, the job table and triggers, re-read
when they fire; and what the production fire engine is told of it all, as the daemon tells
it: the cluster view (`ClusterView`), the job table (`JobsSnapshot`), session loss, pending
triggers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sim.member.base import RETRY, MemberBase
from sim.world import ConnectionLoss, expired
from sim.zkmodel import NodeExists, WatchEvent, ZkError, ZkModel
from zksched.core.firekey import format_utc
from zksched.core.jobtable import JobEntry
from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.runtime.membership.job_watch import JobsSnapshot, Trigger
from zksched.runtime.membership.view import ClusterView

STOP_RUNS_WAIT = 10.0  # after the grace: terminated commands are waited for this long
STOP_DRAIN_WAIT = 5.0  # then results still being written


class MemberSession(MemberBase):
    """The member's life and session (a part of `SimMember`)."""

    # -- life -----------------------------------------------------------------------------

    def boot(self) -> None:
        self.alive, self.stopping, self.lost, self.connected = True, False, False, False
        self.last_heard = self.world.t
        self._open_session()
        self._watchdog()
        self._ping()
        self.host.beat()

    def crash(self) -> None:
        """Dies at once: its commands with it, its session left to expire."""
        self.world.note(self.name, "crash")
        self.processes.kill_all()
        self._die()

    def claim_landed(self) -> None:
        if self.crash_after_claim and self.alive:
            self.crash_after_claim = False
            self.world.after(0.0001, self.crash)  # before the command can start

    def sigterm(self, grace: float) -> None:
        """The daemon's graceful stop: dispatch nothing more, leave the cluster, let runs
        finish for `grace` seconds, terminate the rest, write what is left, close."""
        self.world.note(self.name, "sigterm")
        self.stopping = True
        self.engine.stop_dispatching()
        if self.session is not None and self.connected:
            session = self.session

            def leave(zk: ZkModel) -> None:
                for path in zk.ephemerals_of(session):
                    if path.startswith("/members/"):
                        zk.delete(session, path)

            self._call(leave, lambda r: None)
        self.world.after(0.05, self._stop_step, self.world.t + grace, False)

    def _stop_step(self, give_up: float, terminated: bool) -> None:
        if not self.alive:
            return
        engine, t = self.engine, self.world.t
        if engine.busy() and t < give_up:
            self.world.after(0.05, self._stop_step, give_up, terminated)
            return
        if engine.commands.runs and t < give_up + STOP_RUNS_WAIT:
            if not terminated:
                engine.commands.terminate_all("the daemon is stopping")
            self.world.after(0.05, self._stop_step, give_up, True)
            return
        engine.commands.terminating = True
        if not engine.io.idle() and t < give_up + STOP_RUNS_WAIT + STOP_DRAIN_WAIT:
            self.world.after(0.05, self._stop_step, give_up, True)
            return
        engine.io.unwritten.flush()
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
        self.alive = False
        self.incarnation += 1
        self.session = None

    # -- the session ----------------------------------------------------------------------

    def _open_session(self) -> None:
        timeout, t = self.timeout, self.world.t

        def opened(result: Any) -> None:
            if isinstance(result, ZkError):
                self.world.after(RETRY, self._open_session)
                return
            self.session, self.my_znode = result, None
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
            elif not isinstance(result, ZkError):
                self.my_znode = result.rsplit("/", 1)[1]
                self._refresh()
            elif isinstance(result, NodeExists):
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
                self.my_znode = result[-1].rsplit("/", 1)[1]
                self._refresh()
            else:
                self._register()

        self._call(
            lambda zk: [p for p in zk.ephemerals_of(session) if p.startswith("/members/")], found
        )

    def _contact(self, result: Any) -> None:
        if expired(result):
            self.session_expired()
        elif not isinstance(result, ConnectionLoss):
            self.heard()

    def heard(self) -> None:
        self.last_heard = self.world.t
        if not self.connected and not self.refreshing and self.session is not None:
            self._refresh()

    def session_expired(self) -> None:
        if self.session is not None and self.alive and not self.refreshing:
            self.world.note(self.name, "session expired (told on reconnect)")
            self._session_gone()
            self.session = None
            self._open_session()

    def _session_gone(self) -> None:
        if not self.lost:
            self.engine.session_lost()
        self.lost, self.connected = True, False
        self.ledger.link(self.name, self.world.t, False)

    def _view(self) -> ClusterView:
        return ClusterView(self.connected, self.session, self.name, self.my_znode, self.owners)

    def _watchdog(self) -> None:
        if not self.alive:
            return
        silence = self.world.t - self.last_heard
        if self.connected and silence > self.timeout / 3:
            self.world.note(self.name, "no contact: not connected")
            self.connected = False
            self.ledger.link(self.name, self.world.t, False)
            self.engine.update_view(self._view())
        if not self.lost and self.session is not None and silence > self.timeout / 2:
            self.world.note(self.name, "no contact: session treated as lost")
            self.lost = True
            self.engine.session_lost()
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
            was = self.connected
            self.connected, self.lost = True, False
            self.ledger.link(self.name, self.world.t, True)
            if not was:
                self.world.note(self.name, f"connected (session {session})")
            self.engine.update_view(self._view())
            self._take_triggers(triggers)

        self._call(read, done)

    def _set_members(self, names: list[str]) -> None:
        labels = self.ledger.labels
        self.owners = OwnerTable(
            Member(n.rsplit(".", 1)[0], labels=labels.get(n.rsplit(".", 1)[0], {}), znode=n)
            for n in names
        )

    def _set_table(self, version: int) -> None:
        if version != self.table_version:
            self.table_version = version
            self.table = self.ledger.tables[version]
            entries = {
                name: JobEntry(name, spec, None, format_utc(datetime.fromtimestamp(at, UTC)))
                for name, (spec, at) in self.table.items()
            }
            self.engine.update_jobs(JobsSnapshot(version, entries))

    def watch_fired(self, event: WatchEvent) -> None:
        # also while the watchdog has us "not connected": the session is fine, and a watch
        # is one-shot (kazoo calls it back whatever our own view of the connection is)
        if not self.alive or self.session is None:
            return
        session = self.session
        if event.path.startswith("/locks/"):
            self.stores.leases.watch_fired(event)
        elif event.path == "/members":
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
            self.engine.update_view(self._view())

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
        self.engine.triggers([Trigger(node, node.rsplit(".", 1)[0]) for node in result])
