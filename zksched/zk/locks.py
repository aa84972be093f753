"""The per-job run lock: kazoo's Lock, with the guards it lacks (ZOOKEEPER-NOTES.md).

- kazoo's Lock retries forever inside `acquire()`: we always pass a deadline;
- once held, nothing watches it: we set an exists-watch on our own lock node, so that a
  lock that vanishes mid-run (session expiry, a hand-deleted node) is noticed;
- a failed acquire can leave an orphan contender of ours (kazoo #732) that would block the
  job forever: a contender carrying our member id and session whose tag is not one of the
  locks this process holds (`HeldLocks`) is deleted;
- after the session is lost a Lock object is discarded, never reused (kazoo #282).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType
from kazoo.recipe.lock import Lock

from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)


class HeldLocks:
    """The tags of the locks (and lock attempts) alive in this process."""

    def __init__(self) -> None:
        self._tags: set[str] = set()
        self._mutex = threading.Lock()

    def add(self, tag: str) -> None:
        with self._mutex:
            self._tags.add(tag)

    def discard(self, tag: str) -> None:
        with self._mutex:
            self._tags.discard(tag)

    def __contains__(self, tag: object) -> bool:
        with self._mutex:
            return tag in self._tags


class JobLock:
    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        job: str,
        member_id: str,
        session_id: int,
        timeout: float,
        held: HeldLocks,
    ) -> None:
        self._client = client
        self._path = paths.job_lock(job)
        self._session_tag = f"{member_id}/{session_id:x}/"
        self._owner_tag = self._session_tag + uuid.uuid4().hex[:12]
        self._registry = held
        self._lock = Lock(client, self._path, identifier=self._owner_tag)
        self._timeout = timeout
        self._lost = threading.Event()
        self._on_lost: Callable[[], None] | None = None
        self.held = False

    def try_acquire(self, wait: float = 0.25) -> bool:
        """Take the lock if it is free or freed within `wait` seconds. False: someone else
        holds it.

        kazoo's non-blocking acquire cannot take a deadline (and then retries forever while
        disconnected), so this is a blocking acquire with a short timeout: a previous run
        that is just finishing does not cost the next instant a `still-running` skip.
        """
        self._registry.add(self._owner_tag)
        try:
            got = bool(self._lock.acquire(blocking=True, timeout=wait))
        except LockTimeout:
            got = False
        except BaseException:
            self._registry.discard(self._owner_tag)
            raise
        self.held = got
        if got:
            self._watch_own_node()
        else:
            self._registry.discard(self._owner_tag)
            self._clear_orphans()
        return got

    def holder(self) -> str | None:
        try:
            contenders = self._lock.contenders()
        except (KazooException, KazooTimeoutError):
            return None
        return contenders[0] if contenders else None

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call `callback` (from kazoo's watch thread: keep it short) if the node vanishes."""
        self._on_lost = callback
        if self._lost.is_set():
            callback()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        self._registry.discard(self._owner_tag)
        try:
            if self._client.connected:
                self._lock.release()
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("could not release lock %s (%s); its session will", self._path, exc)

    # -- internals --------------------------------------------------------------------------

    def _node_path(self) -> str | None:
        node = self._lock.node
        return f"{self._path}/{node}" if node else None

    def _watch_own_node(self) -> None:
        path = self._node_path()
        if path is None:
            return

        def watcher(event: Any) -> None:
            if event.type == EventType.DELETED and self.held:
                self._lost.set()
                if self._on_lost is not None:
                    self._on_lost()
            elif event.type != EventType.DELETED and self.held:
                with contextlib.suppress(Exception):
                    self._client.exists_async(path, watcher)  # re-arm (one-shot watches)

        try:
            stat = wait(self._client.exists_async(path, watcher), self._timeout)
        except (KazooException, KazooTimeoutError):
            return
        if stat is None:
            self._lost.set()

    def _clear_orphans(self) -> None:
        """Delete contenders of this member's current session that we do not hold."""
        try:
            children = wait(self._client.get_children_async(self._path), self._timeout)
            for child in children:
                path = f"{self._path}/{child}"
                data, _ = wait(self._client.get_async(path), self._timeout)
                tag = data.decode(errors="replace")
                if tag.startswith(self._session_tag) and tag not in self._registry:
                    log.warning("deleting orphaned lock contender %s of this member", path)
                    with contextlib.suppress(NoNodeError):
                        wait(self._client.delete_async(path), self._timeout)
        except (KazooException, KazooTimeoutError, NoNodeError):
            pass
