"""The values of the ZooKeeper model's requests: a node's Stat, a WatchEvent, a multi's ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.zkmodel.errors import ZkError

EventKind = Literal["created", "deleted", "changed", "child"]


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
