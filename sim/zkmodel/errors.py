"""The errors the ZooKeeper model raises, as ZooKeeper names them."""

from __future__ import annotations


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
