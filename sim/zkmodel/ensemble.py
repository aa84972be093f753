"""The ensemble as its clients see it: sessions, reads, writes, multis and one-shot watches.

`ZkModel` keeps the sessions (each with its timeout, its watches and its queued events) and
the one total order of writes (the zxid); the nodes are its `ZkTree`'s. A write is one
transaction: the tree's primitives stamp its zxid, and what they changed fires the watches
set on it, queued as events for the simulator to take.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.zkmodel.errors import BadVersion, NoNode, RolledBack, SessionExpired, ZkError
from sim.zkmodel.tree import ZkTree, _SetUndo, _TreeUndo, _Trigger
from sim.zkmodel.values import Create, Delete, Op, OpResult, SetData, Stat, WatchEvent


class _Session:
    __slots__ = ("child_watches", "data_watches", "events", "last", "timeout")

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout
        self.last = now
        # Paths this session watches, so its watches can be dropped when it dies.
        self.data_watches: set[str] = set()
        self.child_watches: set[str] = set()
        self.events: list[WatchEvent] = []


class ZkModel:
    """The ensemble. Single ops raise ZkError; multi returns errors as values."""

    __slots__ = (
        "_child_w",
        "_data_w",
        "_next_session",
        "_orphan_events",
        "_sessions",
        "_tick",
        "_tree",
        "_zxid",
    )

    def __init__(self, tick: float = 0.5) -> None:
        if tick <= 0:
            raise ValueError("tick must be positive")
        self._tick = tick
        self._zxid = 0
        self._next_session = 1
        self._tree = ZkTree()
        self._sessions: dict[int, _Session] = {}
        # path -> watching sessions; dicts rather than sets keep firing order deterministic
        # (registration order) independent of hashing.
        self._data_w: dict[str, dict[int, None]] = {}
        self._child_w: dict[str, dict[int, None]] = {}
        self._orphan_events: dict[int, list[WatchEvent]] = {}

    @property
    def zxid(self) -> int:
        return self._zxid

    # ---- sessions ----

    def open_session(self, timeout: float, now: float) -> int:
        tick = self._tick
        sid = self._next_session
        self._next_session = sid + 1
        self._sessions[sid] = _Session(min(max(timeout, 2 * tick), 20 * tick), now)
        return sid

    def session_timeout(self, session: int) -> float:
        return self._live(session).timeout

    def touch(self, session: int, now: float) -> None:
        s = self._live(session)
        if now > s.last:
            s.last = now

    def alive(self, session: int) -> bool:
        return session in self._sessions

    def expire_due(self, now: float) -> list[int]:
        due = [sid for sid, s in self._sessions.items() if now - s.last > s.timeout]
        for sid in due:
            self._kill(sid)
        return due

    def expire(self, session: int) -> None:
        # Idempotent: a fault injector may race the timeout to it.
        if session in self._sessions:
            self._kill(session)

    def close_session(self, session: int) -> None:
        self._live(session)  # a client closing a dead session is told so, like any request
        self._kill(session)

    def _live(self, session: int) -> _Session:
        s = self._sessions.get(session)
        if s is None:
            raise SessionExpired(session)
        return s

    def _kill(self, sid: int) -> None:
        s = self._sessions[sid]
        # Drop its watches first: a dying session gets no events of its own expiry.
        for table, paths in ((self._data_w, s.data_watches), (self._child_w, s.child_watches)):
            for path in paths:
                w = table[path]
                del w[sid]
                if not w:
                    del table[path]
        triggers: list[_Trigger] = []
        ephemerals = self._tree.ephemerals_of(sid)
        if ephemerals:
            zxid = self._zxid + 1  # all of them in one transaction
            for path in ephemerals:
                self._tree.delete(path, -1, zxid, triggers, None)
            self._zxid = zxid
        del self._sessions[sid]
        if s.events:
            self._orphan_events[sid] = s.events
        self._fire(triggers)

    # ---- reads ----

    def get(self, session: int, path: str, watch: bool = False) -> tuple[bytes, Stat]:
        s = self._live(session)
        node = self._tree.nodes.get(path)
        if node is None:
            raise NoNode(path)  # a failed get sets no watch, as on the server
        if watch:
            self._watch(self._data_w, s.data_watches, path, session)
        return node.data, node.stat()

    def exists(self, session: int, path: str, watch: bool = False) -> Stat | None:
        s = self._live(session)
        if watch:
            self._watch(self._data_w, s.data_watches, path, session)
        node = self._tree.nodes.get(path)
        return None if node is None else node.stat()

    def get_children(self, session: int, path: str, watch: bool = False) -> list[str]:
        s = self._live(session)
        node = self._tree.nodes.get(path)
        if node is None:
            raise NoNode(path)
        if watch:
            self._watch(self._child_w, s.child_watches, path, session)
        return sorted(node.children)

    @staticmethod
    def _watch(table: dict[str, dict[int, None]], mine: set[str], path: str, sid: int) -> None:
        w = table.get(path)
        if w is None:
            table[path] = {sid: None}
        else:
            w[sid] = None
        mine.add(path)

    # ---- writes ----

    def create(
        self,
        session: int,
        path: str,
        data: bytes = b"",
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> str:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        actual = self._tree.create(
            session, path, data, ephemeral, sequential, makepath, zxid, triggers, None
        )
        self._zxid = zxid
        self._fire(triggers)
        return actual

    def set(self, session: int, path: str, data: bytes, version: int = -1) -> Stat:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        stat = self._tree.set_data(path, data, version, zxid, triggers, None)
        self._zxid = zxid
        self._fire(triggers)
        return stat

    def delete(self, session: int, path: str, version: int = -1) -> None:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        self._tree.delete(path, version, zxid, triggers, None)
        self._zxid = zxid
        self._fire(triggers)

    def multi(self, session: int, ops: Sequence[Op]) -> list[OpResult]:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        tree_undo: list[_TreeUndo] = []
        set_undo: list[_SetUndo] = []
        results: list[OpResult] = []
        tree = self._tree
        for i, op in enumerate(ops):
            try:
                if isinstance(op, Create):
                    results.append(
                        tree.create(
                            session,
                            op.path,
                            op.data,
                            op.ephemeral,
                            op.sequential,
                            False,
                            zxid,
                            triggers,
                            tree_undo,
                        )
                    )
                elif isinstance(op, Delete):
                    tree.delete(op.path, op.version, zxid, triggers, tree_undo)
                    results.append(None)
                elif isinstance(op, SetData):
                    results.append(
                        tree.set_data(op.path, op.data, op.version, zxid, triggers, set_undo)
                    )
                else:
                    node = tree.nodes.get(op.path)
                    if node is None:
                        raise NoNode(op.path)
                    if op.version != -1 and op.version != node.version:
                        raise BadVersion(op.path)
                    results.append(None)
            except ZkError as err:
                tree.rollback(tree_undo, set_undo)
                failed: list[OpResult] = [RolledBack(o.path) for o in ops]
                failed[i] = err
                return failed
        if tree_undo or set_undo:
            self._zxid = zxid
        self._fire(triggers)
        return results

    # ---- watches ----

    def _fire(self, triggers: list[_Trigger]) -> None:
        data_w = self._data_w
        child_w = self._child_w
        if not data_w and not child_w:
            return
        sessions = self._sessions
        for kind, path in triggers:
            if kind == "child":
                w = child_w.pop(path, None)
                if w:
                    for sid in w:
                        s = sessions[sid]
                        s.child_watches.discard(path)
                        s.events.append(WatchEvent(sid, kind, path))
                continue
            w = data_w.pop(path, None)
            if w:
                for sid in w:
                    sessions[sid].data_watches.discard(path)
            if kind == "deleted":
                cw = child_w.pop(path, None)
                if cw:
                    for sid in cw:
                        sessions[sid].child_watches.discard(path)
                    w = cw if w is None else w | cw  # one event per session
            if w:
                for sid in w:
                    sessions[sid].events.append(WatchEvent(sid, kind, path))

    def take_events(self, session: int) -> list[WatchEvent]:
        s = self._sessions.get(session)
        if s is None:
            return self._orphan_events.pop(session, [])
        events = s.events
        if not events:
            return []  # never hand out the live queue
        s.events = []
        return events

    # ---- introspection for checkers (no session needed) ----

    def node_paths(self) -> list[str]:
        return sorted(self._tree.nodes)

    def data_of(self, path: str) -> bytes:
        return self._tree.node(path).data

    def stat_of(self, path: str) -> Stat:
        return self._tree.node(path).stat()

    def ephemerals_of(self, session: int) -> list[str]:
        return self._tree.ephemerals_of(session) if session in self._sessions else []
