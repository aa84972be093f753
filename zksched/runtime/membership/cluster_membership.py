"""Keeping this member in the cluster, and the owner table current.

One coordinator thread does every ZooKeeper call for membership. kazoo's state listener and
the members watch only record what happened and wake that thread: they run on kazoo's own
threads and must never block (kazoo #381).

Fail-safe: the published `ClusterView` says `connected=False` the moment the session is
SUSPENDED or LOST, and a view counts as owning jobs only when it was read in the current
session and contains this member's own node.

Contact watchdog: kazoo cannot be trusted to notice a dead connection in time. It pings only
after read_timeout/2 (T/3) without sending anything and counts every request as a ping, so a
member that keeps firing jobs into a partition may never see SUSPENDED. A small thread
therefore probes ZooKeeper every T/12 (at most 1 s) and measures the silence since the last
reply (to the probe, or to any other request: in a burst the probe waits behind thousands,
or to kazoo's pings): past T/3
the member owns nothing and gives the connection up (a new one gets through while the
session lives: a blip costs the blip); at T/2 the session is treated as lost (listeners
stop runs). The server cannot expire the session before T after it last heard from us, so
this stays ahead of any takeover whatever kazoo believes. T is the session timeout the
server granted when that is shorter than the one asked for (kazoo keeps the one asked for;
connection.make_client notes the granted one).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState

from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.runtime.membership.join_hold import JoinHold
from zksched.runtime.membership.view import ClusterView
from zksched.zk.connection import abandon_connection, ensure_paths
from zksched.zk.handler import last_reply, session_timeout_of
from zksched.zk.membership import MemberReader, MemberRegistration, MemberSnapshot
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

RESYNC_INTERVAL = 30.0  # re-read members even without a watch event, in case one was lost
RETRY_DELAY = 0.5
FIRST_RESTART_DELAY = 0.2  # seconds before a client whose connection loop died starts again
MAX_RESTART_DELAY = 2.0  # the restart delay doubles up to this; an auth failure waits this long


ViewListener = Callable[[ClusterView], None]


class ClusterMembership:
    """Joins the cluster, keeps rejoining, and publishes a fresh ClusterView on every change."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        member: Member,
        session_timeout: float,
        call_timeout: float | None = None,
        hosts_label: str | None = None,
        hold_join: float | None = None,
    ) -> None:
        """`hold_join`: into a running cluster, create no node of ours until `join()` is
        called or this many seconds have passed (join_hold.py; None: join at once)."""
        self._client = client
        self._member = member
        self._hold = JoinHold(member.member_id, hold_join)
        self._hosts_label = hosts_label or ",".join(f"{h}:{p}" for h, p in client.hosts)
        self._paths = paths
        self._session_timeout = session_timeout
        self._call_timeout = call_timeout or max(1.0, session_timeout / 2)
        self._restart_delay = FIRST_RESTART_DELAY
        self._last_heard = time.monotonic()
        self._ever_heard = False  # no silence to measure before the first contact
        self._probe_outstanding = False
        self._silent = False
        self._loss_lock = threading.Lock()
        self._watchdog: threading.Thread | None = None
        self._registration = MemberRegistration(client, paths, member, self._call_timeout)
        self._reader = MemberReader(client, paths, self._call_timeout)
        self._wakeup: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._view = ClusterView(False, None, member.member_id, None, OwnerTable())
        self._view_listeners: list[ViewListener] = []
        self._loss_listeners: list[Callable[[], None]] = []
        self._declared_lost = False
        self._dirty = True
        self._paths_ready_session: int | None = None
        self._last_read = 0.0
        self._next_retry = 0.0
        self._waiting_since = time.monotonic()
        self._last_wait_log = 0.0
        self.heartbeat = time.monotonic()  # for /healthz: the loop is alive

    # -- public ---------------------------------------------------------------------------

    @property
    def view(self) -> ClusterView:
        return self._view

    @property
    def member_id(self) -> str:
        return self._registration.member_id

    def add_view_listener(self, listener: ViewListener) -> None:
        """Called on the coordinator thread with each new view. Keep it short."""
        self._view_listeners.append(listener)

    def add_session_loss_listener(self, listener: Callable[[], None]) -> None:
        """Called (coordinator thread) when the session is, or may already be, gone."""
        self._loss_listeners.append(listener)

    def join(self) -> None:
        """Create this member's node now (it was held back: see `hold_join`). Any thread."""
        if self._hold.release():
            self._wakeup.put("join")

    def job_table_read(self) -> None:
        """The job table came: a held join waits for its weighing (join_hold.py)."""
        self._hold.table_read()

    def start(self) -> None:
        if self._thread is not None:
            return  # idempotent
        self._client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="zksched-cluster", daemon=True)
        self._thread.start()
        self._watchdog = threading.Thread(
            target=self._watch_contact, name="zksched-contact", daemon=True
        )
        self._watchdog.start()
        if self._client.connected:
            self._wakeup.put("state")

    def stop(self) -> None:
        """Leave the cluster: delete our node so that the others take over at once."""
        self._stopping.set()
        self._wakeup.put("stop")
        if self._thread is not None:
            self._thread.join(timeout=self._call_timeout + 2)
        if self._watchdog is not None:
            self._watchdog.join(timeout=2)
        self._client.remove_listener(self._on_state)
        # owning nothing from now on, on the same session: a claim answered while the daemon
        # stops is still its own to run (the next owner finds it taken), not a skip
        self._publish(replace(self._view, my_znode=None, joining=None))
        if self._client.connected:
            try:
                self._registration.leave()
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("could not delete member node on stop (%s); session close will", exc)

    # -- kazoo callbacks: never block -------------------------------------------------------

    def _on_state(self, state: KazooState) -> None:
        if state != KazooState.CONNECTED:
            # Fail-safe at once: nothing is owned while not connected.
            self._view = replace(self._view, connected=False)
            if state == KazooState.LOST:
                self._view = replace(self._view, my_znode=None, session_id=None)
        self._wakeup.put(f"state:{state}")

    def _on_members_changed(self, _event: Any) -> None:
        self._wakeup.put("members")

    # -- the coordinator thread -----------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.heartbeat = time.monotonic()
            try:
                reason = self._wakeup.get(timeout=self._tick())
            except queue.Empty:
                reason = "tick"
            if self._stopping.is_set():
                break
            if reason.startswith("state:"):
                self._state_changed(reason[len("state:") :])
            elif reason in ("members", "join"):
                self._dirty = True
            try:
                self._step()
            except Exception:  # the loop must survive anything; say what happened
                log.exception("cluster coordinator step failed; retrying")
                self._dirty = True
                self._next_retry = time.monotonic() + RETRY_DELAY

    def _tick(self) -> float:
        return 0.5 if self._dirty else 1.0

    def _state_changed(self, state: str) -> None:
        log.info("ZooKeeper session %s", state.lower(), extra={"event": "session", "state": state})
        if state == KazooState.CONNECTED:
            self._restart_delay = FIRST_RESTART_DELAY
            self._dirty = True
            self._next_retry = 0.0
            if self._declared_lost and self._registration.session_id == self._current_session():
                log.info("session survived the outage after all; carrying on")
            self._declared_lost = False
        else:
            if state == KazooState.LOST:
                self._declare_lost("session expired")
            self._publish(self._view)  # already marked disconnected by the listener

    def _step(self) -> None:
        now = time.monotonic()
        dead = self._client.client_state
        if dead in (KeeperState.AUTH_FAILED, KeeperState.CLOSED):
            # kazoo gave up (auth failure, or its connection loop died on an unexpected
            # error, such as replies out of order after a path that lost bytes): without a
            # restart this member would wait forever as a zombie. Soon, while the session
            # may still be alive on the server; later each time it happens again.
            delay = MAX_RESTART_DELAY if dead == KeeperState.AUTH_FAILED else self._restart_delay
            self._restart_delay = min(MAX_RESTART_DELAY, self._restart_delay * 2)
            log.error(
                "ZooKeeper client stopped (%s); restarting it in %.1fs",
                dead,
                delay,
                extra={"event": "client-restart"},
            )
            self._restart_client_later(delay)
            return
        if not self._client.connected:
            self._log_waiting(now)
            return
        if self._silent:
            return  # no reply for a while: the watchdog wakes us when ZooKeeper answers
        self._waiting_since = now
        if self._hold.overdue(now):
            self._dirty = True
        if now - self._last_read > RESYNC_INTERVAL:
            self._dirty = True
        if self._dirty and now >= self._next_retry:
            self._refresh()

    def _refresh(self) -> None:
        session_id = self._current_session()
        try:
            if self._paths_ready_session != session_id:
                ensure_paths(self._client, [self._paths.members], self._call_timeout)
                self._paths_ready_session = session_id
            self._dirty = False
            snapshot = self._reader.read(self._on_members_changed)
            znode: str | None = None
            if self._hold.may_join(snapshot.members):
                znode = self._registration.ensure(snapshot)
                if znode not in {m.znode for m in snapshot.members}:
                    snapshot = self._reader.read(self._on_members_changed)
        except (KazooException, KazooTimeoutError, RuntimeError) as exc:
            self._dirty = True
            self._next_retry = time.monotonic() + RETRY_DELAY
            log.warning("could not refresh membership (%s); retrying", type(exc).__name__)
            return
        self._last_read = time.monotonic()
        self._heard()
        if session_id != self._current_session() or not self._client.connected:
            self._dirty = True  # the session moved on while we read: read again
            return
        self._publish_snapshot(snapshot, session_id, znode)

    def _publish_snapshot(
        self, snapshot: MemberSnapshot, session_id: int | None, znode: str | None
    ) -> None:
        old = self._view
        table = OwnerTable(snapshot.members)
        if table == old.table:
            # the same members (a resync, a reconnect): keep the old table and its memo, so
            # that nobody recomputes every job's owner (100,000 jobs: most of a second)
            table = old.table
        joining = None
        if znode is None:
            joining = self._member
            self._hold.waiting()
        view = ClusterView(True, session_id, self.member_id, znode, table, joining)
        if view == old:
            return  # nothing changed: the scheduler need not re-align its owned set
        if old.table != table or not old.connected or old.my_znode != znode:
            joined = sorted(set(table.member_ids) - set(old.table.member_ids))
            left = sorted(set(old.table.member_ids) - set(table.member_ids))
            log.info(
                "owner table rebuilt: %d members%s%s",
                len(table),
                f", joined {', '.join(joined)}" if joined else "",
                f", left {', '.join(left)}" if left else "",
                extra={
                    "event": "members",
                    "members": list(table.member_ids),
                    "digest": view.digest,
                    "znode": znode,
                },
            )
        self._publish(view)

    def _publish(self, view: ClusterView) -> None:
        with self._lock:
            self._view = view
            listeners = list(self._view_listeners)
        for listener in listeners:
            try:
                listener(view)
            except Exception:
                log.exception("view listener failed")

    # -- the contact watchdog thread ------------------------------------------------------

    # Silence (no reply) thresholds, see the module docstring: of the session timeout the
    # server granted, when it granted less than was asked.

    @property
    def silence_limit(self) -> float:
        return session_timeout_of(self._client, self._session_timeout) / 3

    @property
    def loss_margin(self) -> float:
        return session_timeout_of(self._client, self._session_timeout) / 2

    def _probe_interval(self) -> float:
        # at most 1 s: before the first connect the granted timeout is not known yet
        return min(1.0, session_timeout_of(self._client, self._session_timeout) / 12)

    def _watch_contact(self) -> None:
        ticked = time.monotonic()
        stall_ended = 0.0  # when the watchdog last woke late (this process was held)
        while not self._stopping.wait(interval := self._probe_interval()):
            # Woken late: this process was held (a full garbage collection of a million
            # jobs, a starved CPU) and read nothing meanwhile, whatever ZooKeeper sent. Such
            # a stall counts toward the loss margin (the server heard nothing from us either)
            # but not toward the silence limit: ownership waits for a reply sent after it.
            now = time.monotonic()
            if now - ticked > 2 * interval:
                stall_ended = now
            ticked = now
            if self._client.connected and not self._probe_outstanding:
                self._probe_outstanding = True
                try:
                    self._client.exists_async("/").rawlink(self._on_probe_reply)
                except Exception:  # closed between the check and the call
                    self._probe_outstanding = False
            if not self._ever_heard:
                continue
            answered = last_reply(self._client.handler)
            heard = self._last_heard if answered is None else max(answered, self._last_heard)
            silence = time.monotonic() - heard
            if silence >= self.loss_margin:
                self._declare_lost(
                    f"no reply from ZooKeeper for {silence:.1f}s; the session may expire soon"
                )
            silence = min(silence, time.monotonic() - stall_ended)
            if silence > self.silence_limit and not self._silent:
                self._silent = True
                log.warning(
                    "no reply from ZooKeeper for %.1fs; owning nothing until it answers",
                    silence,
                    extra={"event": "silent", "silence": round(silence, 3)},
                )
                # a new connection now, while the session may still be alive on the server
                if self._client.connected and abandon_connection(self._client):
                    log.info("reconnecting to ZooKeeper", extra={"event": "reconnect"})
                self._publish(replace(self._view, connected=False))
                self._wakeup.put("silent")

    def _on_probe_reply(self, result: Any) -> None:
        """kazoo's completion thread: record and wake, nothing else."""
        self._probe_outstanding = False
        if result.successful():
            self._heard()

    def _heard(self) -> None:
        self._last_heard = time.monotonic()
        self._ever_heard = True
        if self._declared_lost and self._client.connected:
            with self._loss_lock:
                # Answers again without a new session: it survived (a delay spike, a slow
                # leader election). Runs stopped by the loss policy stay stopped.
                self._declared_lost = False
            log.info("ZooKeeper answers again; the session survived", extra={"event": "heard"})
        if self._silent:
            self._silent = False
            self._dirty = True  # re-read members before owning again
            self._wakeup.put("heard")

    def _declare_lost(self, why: str) -> None:
        with self._loss_lock:  # from the coordinator (LOST) or the watchdog (silence)
            if self._declared_lost:
                return
            self._declared_lost = True
        self._dirty = True
        log.warning(
            "treating the ZooKeeper session as lost: %s", why, extra={"event": "session-lost"}
        )
        self._publish(replace(self._view, connected=False))
        for listener in list(self._loss_listeners):
            try:
                listener()
            except Exception:
                log.exception("session loss listener failed")

    def _log_waiting(self, now: float) -> None:
        if now - self._last_wait_log >= 10.0:
            self._last_wait_log = now
            waited = now - self._waiting_since
            log.warning(
                "not connected to ZooKeeper at %s (for %.0fs); running nothing, still trying",
                self._hosts_label,
                waited,
                extra={"event": "waiting"},
            )

    def _restart_client_later(self, delay: float) -> None:
        if self._stopping.wait(delay):
            return
        try:
            # Not stop() first: the dead loop already reset the client, and stop() would queue
            # a close request that the new loop sends first, closing every new session.
            self._client.start_async()
        except Exception:
            log.exception("client restart failed")

    def _current_session(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None
