"""zksched: a cron scheduler cluster coordinated through ZooKeeper.

The public API for apps (everything else in the package is private):

    from zksched import Cluster
    cluster = Cluster(zk="127.0.0.1:2181", client_id="billing")

    @cluster.cron("0 2 * * *", tz="Europe/Berlin", timeout="1h")
    def nightly_invoice(fire): ...

    cluster.start()

Names are imported on first use, so `zksched`'s command line and pure core do not load the
app layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zksched._version import __version__

if TYPE_CHECKING:
    from zksched.app.cluster import Cluster
    from zksched.app.coordination import AppClaim, ClaimStatus, claim_instant
    from zksched.app.definitions import JobDefinitionError, JobOptions
    from zksched.app.leadership import LeaderTerm
    from zksched.app.registration import ClusterUnavailable, JobConflictError
    from zksched.core.names import name_problem
    from zksched.runtime.run import Fire
    from zksched.zk.applocks import AppLock, LockNotAcquired

_PUBLIC = {
    "Cluster": "zksched.app.cluster",
    "ClusterUnavailable": "zksched.app.registration",
    "JobConflictError": "zksched.app.registration",
    "JobDefinitionError": "zksched.app.definitions",
    "JobOptions": "zksched.app.definitions",
    "Fire": "zksched.runtime.run.functions",
    "LeaderTerm": "zksched.app.leadership",
    "AppClaim": "zksched.app.coordination",
    "ClaimStatus": "zksched.app.coordination",
    "claim_instant": "zksched.app.coordination",
    "name_problem": "zksched.core.names",
    "AppLock": "zksched.zk.applocks",
    "LockNotAcquired": "zksched.zk.applocks",
}

__all__ = [
    "AppClaim",
    "AppLock",
    "ClaimStatus",
    "Cluster",
    "ClusterUnavailable",
    "Fire",
    "JobConflictError",
    "JobDefinitionError",
    "JobOptions",
    "LeaderTerm",
    "LockNotAcquired",
    "__version__",
    "claim_instant",
    "name_problem",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'zksched' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
