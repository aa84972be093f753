"""The fire shell: the thread that runs the fire core (`FireEngine`) and carries out its
actions: ZooKeeper work (`ZkActions`: claims, leases, history, results, skip records) and
runs (`RunActions`: starts and stops through `zksched.runtime.run`)."""
