"""A pure, deterministic, in-memory model of a ZooKeeper ensemble, for the cluster simulator.

One object stands for the whole ensemble as clients see it: one total order of writes
(zxid), server-side session expiry, ephemerals, sequential nodes, versions, one-shot
watches and all-or-none multis. Time is passed in; nothing blocks, sleeps or draws random
numbers, so a run is a function of its inputs alone. Connection loss, partitions and
event delivery are the simulator's business: events are queued here and taken by it.

Deliberate simplifications (a model too faithful is as slow as the real thing):
- The zxid advances only when the tree changes. Opening a session, a failed write, a multi
  of Checks only, and the death of a session without ephemerals spend none (a real server
  spends one on each); a multi or an expiry spends exactly one.
- No ACLs, quotas, persistent watches or /zookeeper subtree. Only create checks a path's
  shape (BadArguments); other ops answer NoNode for a malformed path, which never exists.
- A deleted node gives each session ONE "deleted" event even if it held both a data and a
  child watch there: the server dedupes per connection, the client library fans it out.
- Events queued before a session died stay takeable (once): whether a partitioned client
  would have seen them is for the simulator to decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

EventKind = Literal["created", "deleted", "changed", "child"]


class ZkError(Exception):
    """Base of the model's errors; the argument is the path (or session id) concerned."""


class NoNode(ZkError):
    """The node (or, for create, its parent) does not exist."""


class NodeExists(ZkError):
    """Create of a path that is taken."""


class BadVersion(ZkError):
    """An expected version did not match the node's current one."""


class NotEmpty(ZkError):
    """Delete of a node that has children."""


class SessionExpired(ZkError):
    """The session is gone (expired or closed); the argument is its id."""


class NoChildrenForEphemerals(ZkError):
    """Create under an ephemeral node."""


class BadArguments(ZkError):
    """A malformed path for create, or deleting the root."""


class RolledBack(ZkError):
    """In a failed multi: this op was not at fault, but nothing was applied."""


@dataclass(frozen=True, slots=True)
class Stat:
    czxid: int
    mzxid: int
    pzxid: int
    version: int
    cversion: int
    ephemeral_owner: int
    num_children: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    session: int
    kind: EventKind
    path: str


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Check:
    path: str
    version: int


Op = Create | Delete | SetData | Check
OpResult = str | Stat | None | ZkError


class _Node:
    __slots__ = ("children", "cversion", "czxid", "data", "mzxid", "owner", "pzxid", "version")

    def __init__(self, data: bytes, zxid: int, owner: int) -> None:
        self.data = data
        self.czxid = zxid
        self.mzxid = zxid
        self.pzxid = zxid
        self.version = 0
        self.cversion = 0
        self.owner = owner  # session id of an ephemeral, 0 for persistent
        self.children: set[str] = set()

    def stat(self) -> Stat:
        return Stat(self.czxid, self.mzxid, self.pzxid, self.version, self.cversion,
                    self.owner, len(self.children))


class _Session:
    __slots__ = ("child_watches", "data_watches", "ephemerals", "events", "last", "timeout")

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout
        self.last = now
        self.ephemerals: set[str] = set()
        # Paths this session watches, so its watches can be dropped when it dies.
        self.data_watches: set[str] = set()
        self.child_watches: set[str] = set()
        self.events: list[WatchEvent] = []


# Undo records of a multi in progress. Tree: (path, parent path, name, removed node or None
# for a create, parent's cversion and pzxid before). Set: (node, data, mzxid, version before).
_TreeUndo = tuple[str, str, str, "_Node | None", int, int]
_SetUndo = tuple[_Node, bytes, int, int]
_Trigger = tuple[EventKind, str]


def _split(path: str) -> tuple[str, str]:
    i = path.rindex("/")
    return (path[:i] or "/"), path[i + 1:]


def _well_formed(path: str) -> bool:
    return path == "/" or (path[:1] == "/" and path[-1] != "/" and "//" not in path)


class ZkModel:
    """The ensemble. Single ops raise ZkError; multi returns errors as values."""

    __slots__ = ("_child_w", "_data_w", "_next_session", "_nodes", "_orphan_events",
                 "_sessions", "_tick", "_zxid")

    def __init__(self, tick: float = 0.5) -> None:
        if tick <= 0:
            raise ValueError("tick must be positive")
        self._tick = tick
        self._zxid = 0
        self._next_session = 1
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0)}
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
        if s.ephemerals:
            zxid = self._zxid + 1  # all of them in one transaction
            for path in sorted(s.ephemerals):
                self._delete(path, -1, zxid, triggers, None)
            self._zxid = zxid
        del self._sessions[sid]
        if s.events:
            self._orphan_events[sid] = s.events
        self._fire(triggers)

    # ---- reads ----

    def get(self, session: int, path: str, watch: bool = False) -> tuple[bytes, Stat]:
        s = self._live(session)
        node = self._nodes.get(path)
        if node is None:
            raise NoNode(path)  # a failed get sets no watch, as on the server
        if watch:
            self._watch(self._data_w, s.data_watches, path, session)
        return node.data, node.stat()

    def exists(self, session: int, path: str, watch: bool = False) -> Stat | None:
        s = self._live(session)
        if watch:
            self._watch(self._data_w, s.data_watches, path, session)
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    def get_children(self, session: int, path: str, watch: bool = False) -> list[str]:
        s = self._live(session)
        node = self._nodes.get(path)
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

    def create(self, session: int, path: str, data: bytes = b"", ephemeral: bool = False,
               sequential: bool = False, makepath: bool = False) -> str:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        actual = self._create(session, path, data, ephemeral, sequential, makepath, zxid,
                              triggers, None)
        self._zxid = zxid
        self._fire(triggers)
        return actual

    def set(self, session: int, path: str, data: bytes, version: int = -1) -> Stat:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        stat = self._set(path, data, version, zxid, triggers, None)
        self._zxid = zxid
        self._fire(triggers)
        return stat

    def delete(self, session: int, path: str, version: int = -1) -> None:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        self._delete(path, version, zxid, triggers, None)
        self._zxid = zxid
        self._fire(triggers)

    def multi(self, session: int, ops: Sequence[Op]) -> list[OpResult]:
        self._live(session)
        zxid = self._zxid + 1
        triggers: list[_Trigger] = []
        tree_undo: list[_TreeUndo] = []
        set_undo: list[_SetUndo] = []
        results: list[OpResult] = []
        for i, op in enumerate(ops):
            try:
                if isinstance(op, Create):
                    results.append(self._create(session, op.path, op.data, op.ephemeral,
                                                op.sequential, False, zxid, triggers, tree_undo))
                elif isinstance(op, Delete):
                    self._delete(op.path, op.version, zxid, triggers, tree_undo)
                    results.append(None)
                elif isinstance(op, SetData):
                    results.append(self._set(op.path, op.data, op.version, zxid, triggers,
                                             set_undo))
                else:
                    node = self._nodes.get(op.path)
                    if node is None:
                        raise NoNode(op.path)
                    if op.version != -1 and op.version != node.version:
                        raise BadVersion(op.path)
                    results.append(None)
            except ZkError as err:
                self._rollback(tree_undo, set_undo)
                failed: list[OpResult] = [RolledBack(o.path) for o in ops]
                failed[i] = err
                return failed
        if tree_undo or set_undo:
            self._zxid = zxid
        self._fire(triggers)
        return results

    # Each primitive checks everything before it mutates anything, so a failure leaves the
    # tree untouched; a multi only has to undo the ops that completed before it.

    def _create(self, session: int, path: str, data: bytes, ephemeral: bool, sequential: bool,
                makepath: bool, zxid: int, triggers: list[_Trigger],
                undo: list[_TreeUndo] | None) -> str:
        # A sequential path may end in "/" (the name is then just the counter).
        if not _well_formed(path + "0" if sequential else path):
            raise BadArguments(path)
        if path == "/":
            raise NodeExists(path)
        nodes = self._nodes
        parent_path, name = _split(path)
        parent = nodes.get(parent_path)
        missing: list[str] = []
        if parent is None:
            if not makepath:
                raise NoNode(parent_path)
            p = parent_path
            while p not in nodes:
                missing.append(p)
                p = _split(p)[0]
            if nodes[p].owner:
                raise NoChildrenForEphemerals(p)
        elif parent.owner:
            raise NoChildrenForEphemerals(parent_path)
        if sequential:
            # The counter is the parent's cversion, which deletes advance too; a parent
            # made by makepath starts at 0.
            name += f"{parent.cversion if parent is not None else 0:010d}"
            path = path + name[-10:]
        if parent is not None and name in parent.children:
            raise NodeExists(path)
        for p in reversed(missing):
            self._add(p, b"", 0, zxid, triggers, undo)
        self._add(path, data, session if ephemeral else 0, zxid, triggers, undo)
        return path

    def _add(self, path: str, data: bytes, owner: int, zxid: int, triggers: list[_Trigger],
             undo: list[_TreeUndo] | None) -> None:
        parent_path, name = _split(path)
        parent = self._nodes[parent_path]
        if undo is not None:
            undo.append((path, parent_path, name, None, parent.cversion, parent.pzxid))
        self._nodes[path] = _Node(data, zxid, owner)
        parent.children.add(name)
        parent.cversion += 1
        parent.pzxid = zxid
        if owner:
            self._sessions[owner].ephemerals.add(path)
        triggers.append(("created", path))
        triggers.append(("child", parent_path))

    def _delete(self, path: str, version: int, zxid: int, triggers: list[_Trigger],
                undo: list[_TreeUndo] | None) -> None:
        if path == "/":
            raise BadArguments(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNode(path)
        if version != -1 and version != node.version:
            raise BadVersion(path)
        if node.children:
            raise NotEmpty(path)
        parent_path, name = _split(path)
        parent = self._nodes[parent_path]
        if undo is not None:
            undo.append((path, parent_path, name, node, parent.cversion, parent.pzxid))
        del self._nodes[path]
        parent.children.discard(name)
        parent.cversion += 1
        parent.pzxid = zxid
        if node.owner:
            self._sessions[node.owner].ephemerals.discard(path)
        triggers.append(("deleted", path))
        triggers.append(("child", parent_path))

    def _set(self, path: str, data: bytes, version: int, zxid: int, triggers: list[_Trigger],
             undo: list[_SetUndo] | None) -> Stat:
        node = self._nodes.get(path)
        if node is None:
            raise NoNode(path)
        if version != -1 and version != node.version:
            raise BadVersion(path)
        if undo is not None:
            undo.append((node, node.data, node.mzxid, node.version))
        node.data = data
        node.version += 1
        node.mzxid = zxid
        triggers.append(("changed", path))
        return node.stat()

    def _rollback(self, tree_undo: list[_TreeUndo], set_undo: list[_SetUndo]) -> None:
        # Set undos act on node objects, so they are order-independent of the tree undos;
        # tree undos must run newest first so every parent exists when it is needed.
        for node, data, mzxid, version in reversed(set_undo):
            node.data = data
            node.mzxid = mzxid
            node.version = version
        nodes = self._nodes
        for path, parent_path, name, removed, cversion, pzxid in reversed(tree_undo):
            parent = nodes[parent_path]
            if removed is None:
                owner = nodes.pop(path).owner
                parent.children.discard(name)
                if owner:
                    self._sessions[owner].ephemerals.discard(path)
            else:
                nodes[path] = removed
                parent.children.add(name)
                if removed.owner:
                    self._sessions[removed.owner].ephemerals.add(path)
            parent.cversion = cversion
            parent.pzxid = pzxid

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
        return sorted(self._nodes)

    def data_of(self, path: str) -> bytes:
        return self._node(path).data

    def stat_of(self, path: str) -> Stat:
        return self._node(path).stat()

    def ephemerals_of(self, session: int) -> list[str]:
        s = self._sessions.get(session)
        return [] if s is None else sorted(s.ephemerals)

    def _node(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise NoNode(path)
        return node
