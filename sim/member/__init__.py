"""A simulated member: the daemon's fire shell on the simulator's host.

The fire shell is the production one (zksched/runtime/fire: `FireEngine`, `ZkActions`,
`RunActions`, the fire core), unchanged; what it runs on is simulated: the ZooKeeper model
behind the network as its `FireStores` (`store`, `redelivery`, `leases`, `triggers`),
commands as a process table (`processes`), its pools, queue and clock as a host whose jobs
run in virtual time (`host`), and its fire core watched by the ledger (`core`). Around it,
what the daemon does besides (`session`): a session with a contact watchdog, the member
node, watches on members, the job table and triggers, boot, crash and SIGTERM. `base`
plugs it together.
"""

from __future__ import annotations

from sim.member.session import MemberSession


class SimMember(MemberSession):
    """One simulated member (the constructor is `MemberBase`'s)."""


__all__ = ["SimMember"]
