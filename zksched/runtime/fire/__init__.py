"""The fire shell: the thread that runs the fire core (`FireEngine`) and carries out its
actions: ZooKeeper work (`ZkActions`: claims, leases, history, results, skip records) and
runs (`RunActions`: starts and stops through `zksched.runtime.run`). What it needs of the
world comes in as interfaces: ZooKeeper as `FireStores` (`stores.py`), commands as a
`Runner`, threads, queue and clock as a `Host` (`zksched.runtime.host`). Other packages use
the names below, nothing else of it."""

from zksched.runtime.fire.engine import FireEngine
from zksched.runtime.fire.run_actions import FireSettings

__all__ = [
    "FireEngine",
    "FireSettings",
]
