"""The model's node tree: the nodes, their versions and zxids, and who owns each ephemeral.

`ZkTree` changes only through its primitives (create, delete, set), each given the zxid of
the transaction it is part of. Each checks everything before it mutates anything, so a
failure leaves the tree untouched; each appends what it changed to `triggers` (for the
watches), and, inside a multi, an undo record to `undo`, so that `rollback` can take back
the ops of a multi that completed before one failed.
"""

from __future__ import annotations

from sim.zkmodel.errors import (
    BadArguments,
    BadVersion,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
)
from sim.zkmodel.values import EventKind, Stat


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
        return Stat(
            self.czxid,
            self.mzxid,
            self.pzxid,
            self.version,
            self.cversion,
            self.owner,
            len(self.children),
        )


# Undo records of a multi in progress. Tree: (path, parent path, name, removed node or None
# for a create, parent's cversion and pzxid before). Set: (node, data, mzxid, version before).
_TreeUndo = tuple[str, str, str, "_Node | None", int, int]
_SetUndo = tuple[_Node, bytes, int, int]
_Trigger = tuple[EventKind, str]


def _split(path: str) -> tuple[str, str]:
    i = path.rindex("/")
    return (path[:i] or "/"), path[i + 1 :]


def _well_formed(path: str) -> bool:
    return path == "/" or (path[:1] == "/" and path[-1] != "/" and "//" not in path)


class ZkTree:
    """Every node by path, and the paths of each session's ephemeral nodes."""

    __slots__ = ("_ephemerals", "nodes")

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0)}
        self._ephemerals: dict[int, set[str]] = {}  # owner session -> its ephemeral paths

    def node(self, path: str) -> _Node:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(path)
        return node

    def ephemerals_of(self, owner: int) -> list[str]:
        paths = self._ephemerals.get(owner)
        return sorted(paths) if paths else []

    def _own(self, owner: int, path: str) -> None:
        self._ephemerals.setdefault(owner, set()).add(path)

    def _disown(self, owner: int, path: str) -> None:
        paths = self._ephemerals[owner]
        paths.discard(path)
        if not paths:
            del self._ephemerals[owner]

    def create(
        self,
        session: int,
        path: str,
        data: bytes,
        ephemeral: bool,
        sequential: bool,
        makepath: bool,
        zxid: int,
        triggers: list[_Trigger],
        undo: list[_TreeUndo] | None,
    ) -> str:
        # A sequential path may end in "/" (the name is then just the counter).
        if not _well_formed(path + "0" if sequential else path):
            raise BadArguments(path)
        if path == "/":
            raise NodeExists(path)
        nodes = self.nodes
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

    def _add(
        self,
        path: str,
        data: bytes,
        owner: int,
        zxid: int,
        triggers: list[_Trigger],
        undo: list[_TreeUndo] | None,
    ) -> None:
        parent_path, name = _split(path)
        parent = self.nodes[parent_path]
        if undo is not None:
            undo.append((path, parent_path, name, None, parent.cversion, parent.pzxid))
        self.nodes[path] = _Node(data, zxid, owner)
        parent.children.add(name)
        parent.cversion += 1
        parent.pzxid = zxid
        if owner:
            self._own(owner, path)
        triggers.append(("created", path))
        triggers.append(("child", parent_path))

    def delete(
        self,
        path: str,
        version: int,
        zxid: int,
        triggers: list[_Trigger],
        undo: list[_TreeUndo] | None,
    ) -> None:
        if path == "/":
            raise BadArguments(path)
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(path)
        if version != -1 and version != node.version:
            raise BadVersion(path)
        if node.children:
            raise NotEmpty(path)
        parent_path, name = _split(path)
        parent = self.nodes[parent_path]
        if undo is not None:
            undo.append((path, parent_path, name, node, parent.cversion, parent.pzxid))
        del self.nodes[path]
        parent.children.discard(name)
        parent.cversion += 1
        parent.pzxid = zxid
        if node.owner:
            self._disown(node.owner, path)
        triggers.append(("deleted", path))
        triggers.append(("child", parent_path))

    def set_data(
        self,
        path: str,
        data: bytes,
        version: int,
        zxid: int,
        triggers: list[_Trigger],
        undo: list[_SetUndo] | None,
    ) -> Stat:
        node = self.nodes.get(path)
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

    def rollback(self, tree_undo: list[_TreeUndo], set_undo: list[_SetUndo]) -> None:
        # Set undos act on node objects, so they are order-independent of the tree undos;
        # tree undos must run newest first so every parent exists when it is needed.
        for node, data, mzxid, version in reversed(set_undo):
            node.data = data
            node.mzxid = mzxid
            node.version = version
        nodes = self.nodes
        for path, parent_path, name, removed, cversion, pzxid in reversed(tree_undo):
            parent = nodes[parent_path]
            if removed is None:
                owner = nodes.pop(path).owner
                parent.children.discard(name)
                if owner:
                    self._disown(owner, path)
            else:
                nodes[path] = removed
                parent.children.add(name)
                if removed.owner:
                    self._own(removed.owner, path)
            parent.cversion = cversion
            parent.pzxid = pzxid
