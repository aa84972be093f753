"""The pure core: schedule math, job specs, the owner table. No I/O, no ZooKeeper."""
