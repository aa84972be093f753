"""Named locks for apps that keep their own timer: kazoo's Lock with guards.

What each failure means for a holder (decided here, tested in integration/test_coordination.py):
- SUSPENDED: the session may live on, so the hold goes on (`suspended` is True meanwhile);
  but once ZooKeeper has not answered for half the session timeout (counted from its last
  reply, not from the SUSPENDED, which kazoo reports only two thirds of a session into a
  silent connection), the hold is treated as LOST: the server may expire the session at one
  session timeout, and then someone else may hold the lock. kazoo has no local expiry timer
  (ZOOKEEPER-NOTES.md), so this one is ours; the session timeout is the one the server
  granted when that is shorter than the one asked for.
- LOST (session expired): `lost` turns True and the callback runs. Our node went with the
  session.
- our lock node deleted under us (by hand, or its folder removed): the same, noticed by an
  exists-watch on the node (kazoo's Lock watches nothing once held).
- NodeExists cannot happen: contenders are sequential creates, and the folder is made by
  kazoo's ensure_path, which absorbs a concurrent creator's NodeExists. Children of the
  folder that are not contenders are ignored by kazoo's contender pattern.
`lost` is a one-way latch for the current hold: the app must stop acting on the lock (use
its fencing) and call `release()`; the same object can then acquire again.

Each acquire builds a fresh kazoo Lock (kazoo #282: a Lock used after LOST can hang), whose
calls are bounded (`BoundedCalls`). An attempt that fails on the connection may leave its
contender node behind (kazoo #732), which would block everyone for as long as our session
lives: it is found by the Lock's own unique prefix and deleted, by a background thread if
ZooKeeper does not answer now (until done, or until the session that owns it ends).

Threads: `on_lost` runs on kazoo's event thread (a node deletion or session state) or on a
timer thread (the long SUSPENDED); it must be short and must not call ZooKeeper.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState
from kazoo.recipe.lock import Lock

from zksched.zk.connection import wait
from zksched.zk.handler import last_reply, session_timeout_of
from zksched.zk.locks import BoundedCalls, clear_strangers
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

LostCallback = Callable[[str], None]  # the reason: session-lost, node-deleted, suspended
CLEANUP_STEP = 0.5  # seconds between attempts to delete an orphan contender


class LockNotAcquired(Exception):
    """`hold()` could not take the lock (someone else holds it, or ZooKeeper did not answer
    in time)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"lock {name!r} not acquired: {reason}")
        self.name = name
        self.reason = reason


class AppLock:
    """One holder's handle on the lock `name`: not re-entrant, not shared between threads
    (take one per thread: `Coordinator.lock(name)`)."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        name: str,
        member_id: str,
        call_timeout: float = 3.0,
        on_lost: LostCallback | None = None,
    ) -> None:
        self.name = name
        self._path = paths.app_lock(name)  # ValueError for a bad name
        self._client = client
        self._member_id = member_id
        self._timeout = call_timeout
        self._on_lost = on_lost
        self._mutex = threading.Lock()
        self._lock: Lock | None = None  # the kazoo Lock of the current hold
        self._node: str | None = None  # its node's full path
        self._session: int | None = None
        self._lost_reason: str | None = None
        self._suspend_timer: threading.Timer | None = None

    # -- public ---------------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """We took the lock and have not released it (it may be `lost` meanwhile)."""
        return self._node is not None

    @property
    def lost(self) -> bool:
        """The current hold is over: the lock may be someone else's now."""
        return self._lost_reason is not None

    @property
    def lost_reason(self) -> str | None:
        return self._lost_reason

    @property
    def suspended(self) -> bool:
        """Held, but ZooKeeper cannot be reached right now (not yet lost)."""
        return self.held and not self.lost and self._client.state != KazooState.CONNECTED

    def acquire(self, blocking: bool = False, timeout: float | None = None) -> bool:
        """Take the lock. Non-blocking: True only if it is free now (at most one bounded
        attempt; False while disconnected). Blocking: wait until it is ours, or `timeout`
        seconds (None: for ever, through disconnections). RuntimeError if this handle holds
        it already (not re-entrant)."""
        if self._node is not None:
            raise RuntimeError(f"lock {self.name!r} is held by this handle already; release it")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._client.state == KazooState.CONNECTED:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._attempt(blocking, remaining):
                    return True
                if not blocking:
                    return False
            elif not blocking:
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.1)  # disconnected, or an attempt failed on the connection

    def release(self) -> None:
        """Give the lock up (idempotent). A lost hold has nothing left to delete unless the
        session came back; a node we cannot delete now is deleted in the background."""
        with self._mutex:
            node, lock, session = self._node, self._lock, self._session
            self._node, self._lock, self._session = None, None, None
            self._lost_reason = None
            self._cancel_timer()
        if node is None or lock is None:
            return
        self._client.remove_listener(self._on_state)
        lock.is_acquired = False  # kazoo's own idea of it, for good measure
        try:
            wait(self._client.delete_async(node), self._timeout)
        except NoNodeError:
            pass
        except (KazooException, KazooTimeoutError):
            self._clean_later(lock, session)

    @contextlib.contextmanager
    def hold(self, blocking: bool = False, timeout: float | None = None) -> Iterator[AppLock]:
        """`with lock.hold(): ...`; LockNotAcquired when the lock was not taken."""
        if not self.acquire(blocking=blocking, timeout=timeout):
            reason = "held elsewhere or ZooKeeper not reachable"
            if blocking:
                reason = f"not free within {timeout:g} s" if timeout is not None else reason
            raise LockNotAcquired(self.name, reason)
        try:
            yield self
        finally:
            self.release()

    # -- acquiring ------------------------------------------------------------------------

    def _attempt(self, blocking: bool, timeout: float | None) -> bool:
        lock = Lock(BoundedCalls(self._client, self._timeout), self._path, self._member_id)
        session = self._client.client_id[0] if self._client.client_id else None
        try:
            # kazoo's non-blocking acquire takes no timeout, and its retry deadline is the
            # timeout: without one it retries ConnectionLoss for ever. A "blocking" acquire
            # that waits 0 s for a predecessor is a non-blocking one with a deadline.
            got = bool(lock.acquire(blocking=True, timeout=timeout if blocking else 0.0))
        except LockTimeout:
            got = False
        except (KazooException, KazooTimeoutError) as exc:
            log.debug("attempt at lock %s failed (%s)", self.name, type(exc).__name__)
            self._clean_later(lock, session)
            return False
        if not got:
            self._clean_later(lock, session)  # kazoo cleans up itself; a failed one is ours
            clear_strangers(self._client, self._path, self._timeout)
            return False
        assert lock.node is not None
        with self._mutex:
            self._lock = lock
            self._node = f"{self._path}/{lock.node}"
            self._session = session
            self._lost_reason = None
        self._client.add_listener(self._on_state)
        self._watch_node(self._node)
        current = self._client.client_id  # None while kazoo connects: the listener covers it
        if current is not None and current[0] != session:
            self._mark_lost("session-lost")  # a new session came meanwhile: the node died
        elif self._client.state == KazooState.SUSPENDED:
            self._on_state(KazooState.SUSPENDED)  # suspended before the listener was in
        return True

    def _watch_node(self, path: str) -> None:
        def watcher(event: Any) -> None:
            if self._node != path:
                return  # released or another hold: nothing to say
            if event.type == EventType.DELETED:
                self._mark_lost("node-deleted")
            elif event.type != EventType.NONE:
                with contextlib.suppress(Exception):
                    self._client.exists_async(path, watcher)  # one-shot: re-arm

        try:
            stat = wait(self._client.exists_async(path, watcher), self._timeout)
        except (KazooException, KazooTimeoutError):
            return  # no watch: the state listener covers connection trouble
        if stat is None:
            self._mark_lost("node-deleted")

    # -- losing it ------------------------------------------------------------------------

    def _on_state(self, state: str) -> bool:
        """kazoo's connection thread: flags and a timer, never a ZooKeeper call."""
        if state == KazooState.LOST:
            self._mark_lost("session-lost")
        elif state == KazooState.SUSPENDED:
            with self._mutex:
                if self._node is not None and self._suspend_timer is None:
                    limit = max(0.0, self._loss_margin() - self._silence())
                    self._suspend_timer = threading.Timer(limit, self._suspended_too_long)
                    self._suspend_timer.daemon = True
                    self._suspend_timer.start()
        else:
            with self._mutex:
                self._cancel_timer()
            if self._client.client_id is None or self._client.client_id[0] != self._session:
                self._mark_lost("session-lost")
        return False

    def _session_timeout(self) -> float:
        asked = getattr(self._client, "_session_timeout", 10_000) / 1000  # kazoo keeps ms
        return session_timeout_of(self._client, asked)

    def _loss_margin(self) -> float:
        """Seconds of silence after which the hold counts as lost: half the session."""
        return self._session_timeout() / 2

    def _silence(self) -> float:
        """Seconds since ZooKeeper last answered; for a client without that record, as long
        as kazoo takes to report a silent connection (two thirds of the session)."""
        heard = last_reply(self._client.handler)
        if heard is None:
            return self._session_timeout() * 2 / 3
        return time.monotonic() - heard

    def _suspended_too_long(self) -> None:
        if self._client.state != KazooState.CONNECTED:
            self._mark_lost("suspended")

    def _cancel_timer(self) -> None:
        if self._suspend_timer is not None:
            self._suspend_timer.cancel()
            self._suspend_timer = None

    def _mark_lost(self, reason: str) -> None:
        with self._mutex:
            if self._node is None or self._lost_reason is not None:
                return
            self._lost_reason = reason
            callback = self._on_lost
        log.warning("lock %s lost (%s)", self.name, reason)
        if callback is not None:
            try:
                callback(reason)
            except Exception:
                log.exception("lock-lost callback of %s failed", self.name)

    # -- orphans --------------------------------------------------------------------------

    def _clean_later(self, lock: Lock, session: int | None) -> None:
        """Delete whatever contender `lock` left (found by its unique prefix), now or, if
        ZooKeeper does not answer, in the background while `session` (the one the attempt
        was made in) lives."""
        if self._delete_contenders(lock.prefix):
            return
        threading.Thread(
            target=self._cleanup_loop,
            args=(lock.prefix, session),
            name="zksched-applock-cleanup",
            daemon=True,
        ).start()

    def _cleanup_loop(self, prefix: str, session: int | None) -> None:
        # kazoo's client_id is None while it connects: that is not the end of the session;
        # LOST or another session id is (the contender went with it)
        log.debug("cleanup of %s* in the background", prefix)
        while session is not None and self._client.state != KazooState.LOST:
            current = self._client.client_id
            if current is not None and current[0] != session:
                break
            if self._client.state == KazooState.CONNECTED and self._delete_contenders(prefix):
                return
            time.sleep(CLEANUP_STEP)
        log.debug("cleanup of %s* ends with its session", prefix)

    def _delete_contenders(self, prefix: str) -> bool:
        """True once no contender with `prefix` is left."""
        try:
            children = wait(self._client.get_children_async(self._path), self._timeout)
            for child in children:
                if child.startswith(prefix):
                    log.warning("deleting an orphan contender of lock %s: %s", self.name, child)
                    with contextlib.suppress(NoNodeError):
                        wait(self._client.delete_async(f"{self._path}/{child}"), self._timeout)
        except NoNodeError:
            return True
        except (KazooException, KazooTimeoutError) as exc:
            log.debug("cleanup of %s* failed (%s)", prefix, type(exc).__name__)
            return False
        return True
