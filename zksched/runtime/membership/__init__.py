"""What this member knows of the cluster: its membership and session (`ClusterMembership`),
the owner table it publishes as a `ClusterView`, the job table it watches
(`JobTableWatcher`), and its clock's offset from ZooKeeper's (`ClockProbe`)."""
