"""What this member knows of the cluster: its membership and session (`ClusterMembership`),
the owner table it publishes as a `ClusterView` (and the fire thread follows as an
`OwnerChain`), the job table and triggers it watches
(`JobTableWatcher`, `JobsSnapshot`; the triggers of the jobs it owns taken by
`TriggerIntake`), and its clock's offset from ZooKeeper's (`ClockProbe`). Other packages use
the names below, nothing else of it."""

from zksched.runtime.membership.clockprobe import ClockProbe
from zksched.runtime.membership.cluster_membership import ClusterMembership
from zksched.runtime.membership.job_watch import JobsSnapshot, JobTableWatcher, Trigger
from zksched.runtime.membership.owner_chain import Deriving, OwnerChain
from zksched.runtime.membership.trigger_intake import TriggerIntake
from zksched.runtime.membership.view import ClusterView

__all__ = [
    "ClockProbe",
    "ClusterMembership",
    "ClusterView",
    "Deriving",
    "JobTableWatcher",
    "JobsSnapshot",
    "OwnerChain",
    "Trigger",
    "TriggerIntake",
]
