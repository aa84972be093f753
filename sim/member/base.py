"""What the parts of a simulated member share: its state, its clock, its requests, its hooks.

`SimMember` is made of parts, one concern each, all subclasses of `MemberBase`: the session
and membership (`session`), carrying out the fire core's actions (`actions`), the job lease
(`lease`) and the commands (`commands`). The state they share is set up here, and a part
calls into another only through the hooks declared here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sim.ledger import Ledger, Run
from sim.world import ConnectionLoss, World
from sim.zkmodel import WatchEvent, ZkModel
from zksched.core.fire import model as m
from zksched.core.fire.member import MemberFireCore
from zksched.core.jobspec import JobSpec
from zksched.core.owners import OwnerTable

RETRY = 0.5  # a failed write is sent again this long after


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
        self.core = MemberFireCore(tunables)
        self.incarnation = 0
        self.alive = False
        self.stopping = False
        self.session: int | None = None
        self.connected = False  # as the core was told
        self.lost = False  # the watchdog gave the session up
        self.refreshing = False
        self.last_heard = 0.0
        self.table_version = -1
        self.table: dict[str, tuple[JobSpec, float]] = {}
        self.owners = OwnerTable()
        self.nonces: dict[tuple[str, datetime], str] = {}
        self.locks: dict[tuple[str, int], str] = {}  # (job, take) -> our node, once held
        # (job, take) of takes under way -> their contender node, once created
        self.taking: dict[tuple[str, int], str | None] = {}
        self.leftovers: set[str] = set()  # lock nodes to delete once connected
        self.runs: dict[tuple[str, datetime], Run] = {}
        self.timers: dict[str, float] = {}
        self.skips: dict[str, int] = {}
        self._nonce = 0

    def now(self) -> float:
        return self.world.t + self.skew

    def _call(self, apply: Callable[[ZkModel], Any], on_reply: Callable[[Any], None]) -> None:
        def heard(result: Any) -> None:
            if not isinstance(result, ConnectionLoss):
                self._contact(result)
            on_reply(result)

        self.world.request(self, self.session, apply, heard)

    # -- hooks: each is carried out by one part ----------------------------------------------

    @abstractmethod
    def _contact(self, result: Any) -> None:
        """(session) A reply came back: the session lives, or turned out to have expired."""

    @abstractmethod
    def watch_fired(self, event: WatchEvent) -> None:
        """(session) A watch of our session fired: read again what it watched."""

    @abstractmethod
    def _act(self, actions: list[m.Action]) -> None:
        """(actions) Carry out what the fire core returned."""

    @abstractmethod
    def _event(self, job: str, event: m.JobEvent) -> None:
        """(actions) Tell the fire core what happened to one of its job's fires."""

    @abstractmethod
    def _take_lease(self, job: str, take: int, give_up: float) -> None:
        """(lease) Take the job's lease, waiting for our turn until `give_up`."""

    @abstractmethod
    def _delete_lock(self, path: str) -> None:
        """(lease) Delete a contender node of ours, or keep it as a leftover."""

    @abstractmethod
    def _clear_leftovers(self) -> None:
        """(lease) Delete the contender nodes left over from a lost connection."""

    @abstractmethod
    def _start(
        self, job: str, instant: datetime, kind: str, token: int, attempt: int, incarnation: int
    ) -> None:
        """(commands) Start the fire's command, if this incarnation still lives."""

    @abstractmethod
    def _terminate(self, run: Run, why: str) -> None:
        """(commands) Kill a running command."""
