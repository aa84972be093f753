"""What this member knows of the cluster: its membership and session (`ClusterMembership`),
the owner table it publishes as a `ClusterView`, the job table and triggers it watches
(`JobTableWatcher`; the triggers of the jobs it owns taken by `TriggerIntake`), and its
clock's offset from ZooKeeper's (`ClockProbe`)."""
