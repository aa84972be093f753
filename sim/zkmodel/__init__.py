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

The parts: `ensemble` (ZkModel: sessions, requests, watches), `tree` (the nodes),
`values` (Stat, WatchEvent, the ops of a multi) and `errors`. Import from here.
"""

from sim.zkmodel.ensemble import ZkModel
from sim.zkmodel.errors import (
    BadArguments,
    BadVersion,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
    RolledBack,
    SessionExpired,
    ZkError,
)
from sim.zkmodel.values import (
    Check,
    Create,
    Delete,
    EventKind,
    Op,
    OpResult,
    SetData,
    Stat,
    WatchEvent,
)

__all__ = [
    "BadArguments",
    "BadVersion",
    "Check",
    "Create",
    "Delete",
    "EventKind",
    "NoChildrenForEphemerals",
    "NoNode",
    "NodeExists",
    "NotEmpty",
    "Op",
    "OpResult",
    "RolledBack",
    "SessionExpired",
    "SetData",
    "Stat",
    "WatchEvent",
    "ZkError",
    "ZkModel",
]
