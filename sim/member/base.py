"""A simulated member's state, and the production fire shell plugged into the simulation.

The shell is the daemon's own: `FireEngine` with its `ZkActions` and `RunActions`
(zksched/runtime/fire). What it runs on is the simulator's: ZooKeeper as `SimFireStores`
(the model, through the network), commands as a `ProcessTable`, threads, queue and clock as
a `SimHost`, and its fire core a `TracedCore` (the ledger and the trace watch it). The
member's session and membership (`session.py`) feed the engine its inputs: the cluster
view, the job table, session loss, triggers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from sim.ledger import Ledger
from sim.member.core import TracedCore
from sim.member.host import SimHost
from sim.member.leases import SimLeases
from sim.member.processes import ProcessTable
from sim.member.redelivery import SimRedelivery
from sim.member.store import SimFireClaims
from sim.member.triggers import SimTriggers
from sim.world import World
from sim.zkmodel import WatchEvent
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.core.owners import OwnerTable
from zksched.runtime.fire.engine import FireEngine
from zksched.runtime.fire.run_actions import FireSettings
from zksched.runtime.skips import SkipLog

RETRY = 0.5  # a failed membership read or write is sent again this long after
# jobs aligned a turn: a few, so that the simulated members take and drop their jobs
# over several turns, other events between them (the daemon's slice is larger)
ALIGN_SLICE = 2
DERIVE_SLICE = 3  # entries of a change's owner table a turn: derived over several turns too
CONCURRENCY = 10_000  # commands at once: never the limit here (a wait would widen the
# claim-to-start window the checker allows)


class SimFireStores:
    """The simulator's `FireStores` (zksched/runtime/fire/stores.py), over the model."""

    def __init__(self, host: SimHost, member_id: str) -> None:
        self._host = host
        self.claims = SimFireClaims(host)
        self.redelivery = SimRedelivery(host, self.claims)
        self.leases = SimLeases(host, member_id)
        self.triggers = SimTriggers(host, member_id)

    def connected(self) -> bool:
        return self._host.world.reachable(self._host.member)


class MemberBase(ABC):
    """A simulated member's state, shared by its parts (see `SimMember`)."""

    def __init__(
        self,
        world: World,
        ledger: Ledger,
        name: str,
        skew: float,
        labels: dict[str, str],
        session_timeout: float,
        tunables: m.FireTunables,
        run_of: Callable[[str], tuple[float, str]],
    ) -> None:
        self.world, self.ledger, self.name = world, ledger, name
        self.skew, self.labels, self.timeout = skew, labels, session_timeout
        self.run_of = run_of  # how a run of the job goes: (seconds, exit status)
        self.tunables = tunables
        self.incarnation = 0
        self.alive = False
        self.stopping = False
        self.session: int | None = None
        self.my_znode: str | None = None
        self.connected = False  # as the engine was told
        self.lost = False  # the watchdog gave the session up
        self.refreshing = False
        self.last_heard = 0.0
        self.table_version = -1
        self.table: dict[str, tuple[JobSpec, float]] = {}
        self.owners = OwnerTable()
        self.crash_after_claim = False  # a fault armed: die as soon as a claim lands
        # the shell: the daemon's, on the simulator's host, stores and process table
        self.core = TracedCore(tunables, self)
        self.host = SimHost(self, lambda: self.processes.start_delay())
        self.processes = ProcessTable(self, lambda job, instant: self.core.kinds[(job, instant)])
        self.stores = SimFireStores(self.host, name)
        self.engine = FireEngine(
            self.stores,
            self.processes,
            SkipLog(),
            FireSettings("sim", name, tunables.on_session_loss, concurrency=CONCURRENCY),
            self.host,
            core=self.core,
            align_slice=ALIGN_SLICE,
            derive_slice=DERIVE_SLICE,
        )

    def now(self) -> float:
        return self.world.t + self.skew

    def _call(self, apply: Callable[[Any], Any], on_reply: Callable[[Any], None]) -> None:
        """A membership request (the session's own, not the fire shell's)."""

        def heard(result: Any) -> None:
            self._contact(result)
            on_reply(result)

        self.world.request(self, self.session, apply, heard)

    @abstractmethod
    def watch_fired(self, event: WatchEvent) -> None:
        """(session) A watch of our session fired."""

    @abstractmethod
    def _contact(self, result: Any) -> None:
        """(session) A membership reply came back (or ConnectionLoss)."""

    @abstractmethod
    def heard(self) -> None:
        """(session) A reply of the fire shell's came back: the session lives."""

    @abstractmethod
    def session_expired(self) -> None:
        """(session) A reply of the fire shell's said the session expired."""

    @abstractmethod
    def claim_landed(self) -> None:
        """A claim of ours came back created (a crash may be armed for that moment)."""
