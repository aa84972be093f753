"""The daemon's `FireStores` (runtime/fire/stores.py): the fire shell's ZooKeeper side, made
of this layer's claims, at-least-once markers, job locks and triggers over one client."""

from __future__ import annotations

from kazoo.client import KazooClient

from zksched.zk.claims import FireClaims
from zksched.zk.leases import ZkLeases
from zksched.zk.paths import ClusterPaths
from zksched.zk.redelivery import Redelivery
from zksched.zk.triggers import Triggers


class ZkFireStores:
    def __init__(
        self, client: KazooClient, paths: ClusterPaths, member_id: str, timeout: float
    ) -> None:
        self._client = client
        self.claims = FireClaims(client, paths, timeout)
        self.redelivery = Redelivery(client, paths, self.claims, timeout)
        self.leases = ZkLeases(client, paths, member_id, timeout)
        self.triggers = Triggers(client, paths, timeout)

    def connected(self) -> bool:
        return bool(self._client.connected)
