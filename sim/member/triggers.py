"""Manual triggers in the ZooKeeper model: the simulator's `TriggerStore`
(zksched/runtime/fire/stores.py), as zk/triggers.py does it: a trigger is a sequential node
`/triggers/<job>.<seq>`; the member whose delete succeeds runs it."""

from __future__ import annotations

from kazoo.exceptions import KazooException

from sim.member.host import SimHost, create, delete


class SimTriggers:
    def __init__(self, host: SimHost, member_id: str) -> None:
        self._call = host.call

    def request(self, job: str, requested_by: str) -> str:
        path = self._call(create(f"/triggers/{job}.", sequential=True))
        return path.rsplit("/", 1)[1]

    def take(self, znode: str) -> bool:
        try:
            self._call(delete(f"/triggers/{znode}"))
        except KazooException:
            return False
        return True
