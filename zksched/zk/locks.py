"""The per-job run lock: kazoo's Lock, with the guards it lacks (ZOOKEEPER-NOTES.md).

- kazoo's Lock retries forever inside `acquire()`: we always pass a deadline; and its calls
  are kazoo's blocking ones, which wait for as long as the connection is down (a lock
  attempt in a partition held its thread until the partition ended): it is given a client
  whose blocking calls give up after the call timeout (`BoundedCalls`);
- once held, nothing watches it: we set an exists-watch on our own lock node, so that a
  lock that vanishes mid-run (session expiry, a hand-deleted node) is noticed;
- a failed acquire can leave an orphan contender of ours (kazoo #732) that would block the
  job forever: a contender carrying our member id and session whose tag is not one of the
  locks this process holds (`HeldLocks`) is deleted;
- after the session is lost a Lock object is discarded, never reused (kazoo #282).

Round trips: a lock folder known to exist is not ensured again (kazoo's Lock would, once per
Lock object); the exists-watch on our own node is sent without waiting; and a caller can
delete the node itself, pipelined with others (`release_ops`/`released`). The runtime holds
a job's lock across fires (zksched/runtime/leases.py), so most fires take no lock at all.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType
from kazoo.recipe.lock import Lock

from zksched.zk.connection import delete_tree, wait
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)


class LockAttempt(enum.Enum):
    ACQUIRED = "acquired"
    HELD = "held"  # another contender holds it: the previous run is still going
    UNKNOWN = "unknown"  # the attempt failed on the connection: nothing can be concluded


class HeldLocks:
    """The tags of the locks (and lock attempts) alive in this process."""

    def __init__(self) -> None:
        self._tags: set[str] = set()
        self._mutex = threading.Lock()
        # lock folders known to exist: kazoo's ensure_path is skipped for them
        self._folders: set[str] = set()

    def folder_known(self, path: str) -> bool:
        with self._mutex:
            return path in self._folders

    def note_folder(self, path: str, exists: bool) -> None:
        with self._mutex:
            if exists:
                self._folders.add(path)
            else:
                self._folders.discard(path)

    def add(self, tag: str) -> None:
        with self._mutex:
            self._tags.add(tag)

    def discard(self, tag: str) -> None:
        with self._mutex:
            self._tags.discard(tag)

    def __contains__(self, tag: object) -> bool:
        with self._mutex:
            return tag in self._tags


def member_tag(member_id: str) -> str:
    """What every lock contender's tag of this member starts with (then session and nonce)."""
    return f"{member_id}/"


class BoundedCalls:
    """A KazooClient as kazoo's Lock uses it, whose blocking calls wait at most `timeout`
    seconds (KazooTimeoutError, which the Lock does not retry: the attempt fails, and
    `JobLock` clears what it may have left). Everything else is the client itself."""

    def __init__(self, client: KazooClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        result = self._client.create_async(
            path, value, acl=acl, ephemeral=ephemeral, sequence=sequence, makepath=makepath
        )
        return str(wait(result, self._timeout))

    def get(self, path: str, watch: Any = None) -> Any:
        return wait(self._client.get_async(path, watch), self._timeout)

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        return list(wait(self._client.get_children_async(path, watch), self._timeout))

    def delete(self, path: str, version: int = -1) -> Any:
        return wait(self._client.delete_async(path, version), self._timeout)

    def ensure_path(self, path: str, acl: Any = None) -> Any:
        return wait(self._client.ensure_path_async(path, acl), self._timeout)


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
        self.session_id = session_id
        self._member_tag = member_tag(member_id)
        self._owner_tag = f"{self._member_tag}{session_id:x}/{uuid.uuid4().hex[:12]}"
        self._registry = held
        self._lock = Lock(BoundedCalls(client, timeout), self._path, identifier=self._owner_tag)
        self._lock.assured_path = held.folder_known(self._path)
        self._timeout = timeout
        self._lost = threading.Event()
        self._on_lost: Callable[[], None] | None = None
        self.held = False
        # a failed attempt whose own contender may be left in the folder (its create can land
        # although the call failed) and could not be cleared: the caller must clear it later
        self.may_leave_orphan = False

    def try_acquire(self, wait: float = 0.25) -> LockAttempt:
        """Take the lock if it is free or freed within `wait` seconds.

        kazoo's non-blocking acquire cannot take a deadline (and then retries forever while
        disconnected), so this is a blocking acquire with a short timeout: a previous run
        that is just finishing does not cost the next instant a `still-running` skip.
        kazoo answers False both when someone holds the lock and when the connection broke
        mid-attempt (a partition not yet noticed blocks its calls until the socket drops):
        HELD is returned only when a bounded read shows another contender, else UNKNOWN.
        """
        for attempt in range(2):
            if self._attempt(wait):
                return LockAttempt.ACQUIRED
            holder = self.holder()
            if holder is not None:
                return LockAttempt.HELD
            if attempt == 0 and not self._client.connected:
                break
        return LockAttempt.UNKNOWN

    def _attempt(self, wait: float) -> bool:
        self._registry.add(self._owner_tag)
        try:
            try:
                got = bool(self._lock.acquire(blocking=True, timeout=wait))
            except NoNodeError:
                if not self._lock.assured_path:
                    raise
                # the folder we remembered is gone (the job was deleted and re-created):
                # ensure it this time
                self._registry.note_folder(self._path, exists=False)
                self._lock.assured_path = False
                got = bool(self._lock.acquire(blocking=True, timeout=wait))
        except LockTimeout:
            got = False
        except (KazooException, KazooTimeoutError):
            got = False
        except BaseException:
            self._registry.discard(self._owner_tag)
            raise
        self._registry.note_folder(self._path, exists=True)
        self.held = got
        if got:
            # The session the node really belongs to: the caller's view of the session can
            # lag behind a reconnect by a moment.
            self.session_id = self._client.client_id[0] if self._client.client_id else 0
            self._watch_own_node()
        else:
            self._registry.discard(self._owner_tag)
            self.may_leave_orphan = not self._clear_orphans()
        return got

    def holder(self) -> str | None:
        """The tag of the contender that holds the lock (lowest sequence), by bounded reads;
        None when nobody does or it cannot be read."""
        try:
            children = wait(self._client.get_children_async(self._path), self._timeout)
        except (KazooException, KazooTimeoutError):
            return None
        contenders = sorted(children, key=lambda c: c[-10:])
        for child in contenders:
            try:
                data, _ = wait(self._client.get_async(f"{self._path}/{child}"), self._timeout)
            except NoNodeError:
                continue
            except (KazooException, KazooTimeoutError):
                return None
            return str(data.decode(errors="replace")) or child
        return None

    def on_lost(self, callback: Callable[[], None] | None) -> None:
        """Call `callback` (from kazoo's watch thread: keep it short) if the node vanishes;
        None: nobody is to be told (the run that cared has ended)."""
        self._on_lost = callback
        if callback is not None and self._lost.is_set():
            callback()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def release_ops(self) -> str | None:
        """The path to delete to release the lock, for a caller that releases it inside its
        own transaction (then it calls `released()`); None when there is nothing to delete."""
        return self._node_path() if self.held and not self.lost else None

    def released(self) -> None:
        """The caller's transaction deleted our node: forget the lock."""
        self.held = False
        self._registry.discard(self._owner_tag)
        # kazoo's Lock keeps this state itself; it must match a node we deleted ourselves
        self._lock.is_acquired = False
        self._lock.node = None

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
                notify = self._on_lost
                if notify is not None:
                    notify()
            elif event.type != EventType.DELETED and self.held:
                with contextlib.suppress(Exception):
                    self._client.exists_async(path, watcher)  # re-arm (one-shot watches)

        def settled(result: Any) -> None:
            # kazoo's thread: no blocking; the node missing already means the lock is lost
            try:
                stat = result.get_nowait()
            except Exception:
                return  # no watch (connection trouble): the session listener covers that
            if stat is None and self.held:
                self._lost.set()
                notify = self._on_lost
                if notify is not None:
                    notify()

        # Not awaited: it is pipelined with the claim that follows on the same connection.
        self._client.exists_async(path, watcher).rawlink(settled)

    def _clear_orphans(self) -> bool:
        return clear_orphans(
            self._client, self._path, self._member_tag, self._registry, self._timeout
        )


def ensure_lock_folders(
    client: KazooClient, paths: ClusterPaths, jobs: list[str], held: HeldLocks, timeout: float
) -> None:
    """Make the lock folders of `jobs` that `held` does not know, pipelined (one create
    each, not kazoo's exists-then-create per Lock): fires due together then take their
    locks with no folder round trips. A create that fails is left to the lock's own."""
    missing = [paths.job_lock(job) for job in jobs]
    missing = [path for path in missing if not held.folder_known(path)]
    pending = [(path, client.create_async(path, b"", makepath=True)) for path in missing]
    for path, result in pending:
        try:
            wait(result, timeout)
        except NodeExistsError:
            pass
        except (KazooException, KazooTimeoutError):
            continue
        held.note_folder(path, exists=True)


def clear_orphans(
    client: KazooClient, lock_path: str, member_tag: str, held: HeldLocks, timeout: float
) -> bool:
    """Delete the contenders in `lock_path` of this member's current session that `held` does
    not know; True once the whole folder was read (then none is left), False when a call
    failed (try again later: an orphan blocks the job for as long as the session lives).

    The session is read from each node's ephemeral owner, not its tag: a tag names the
    session the caller believed in, which can be one that just ended."""
    session = client.client_id[0] if client.client_id else None
    if session is None:
        return False
    try:
        children = wait(client.get_children_async(lock_path), timeout)
        for child in children:
            path = f"{lock_path}/{child}"
            try:
                data, stat = wait(client.get_async(path), timeout)
            except NoNodeError:
                continue  # released meanwhile
            if stat.ephemeralOwner == 0:
                with contextlib.suppress(KazooException, KazooTimeoutError):
                    _delete_stranger(client, path, timeout)  # alone: the scan goes on
                continue
            tag = data.decode(errors="replace")
            ours = stat.ephemeralOwner == session and tag.startswith(member_tag)
            if ours and tag not in held:
                log.warning("deleting orphaned lock contender %s of this member", path)
                with contextlib.suppress(NoNodeError):
                    wait(client.delete_async(path), timeout)
    except NoNodeError:
        return True  # no folder, no contender
    except (KazooException, KazooTimeoutError):
        return False
    return True


def clear_strangers(client: KazooClient, lock_path: str, timeout: float) -> None:
    """Delete the nodes in `lock_path` that are not ephemeral (best effort, each alone)."""
    try:
        children = wait(client.get_children_async(lock_path), timeout)
    except (KazooException, KazooTimeoutError):
        return
    for child in children:
        path = f"{lock_path}/{child}"
        with contextlib.suppress(KazooException, KazooTimeoutError):
            _, stat = wait(client.get_async(path), timeout)
            if stat.ephemeralOwner == 0:
                _delete_stranger(client, path, timeout)


def _delete_stranger(client: KazooClient, path: str, timeout: float) -> None:
    # Every contender is ephemeral (it goes with its member's session, and has no
    # children): a persistent node is somebody else's, and one that sorts first would hold
    # the lock for ever. Raises kazoo errors.
    log.warning("deleting lock node %s: it is not ephemeral, so no member made it", path)
    delete_tree(client, path, timeout)
