"""The ZooKeeper layer: connection, paths, membership, job store, claims, locks."""
