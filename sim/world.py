"""The simulated world: a virtual clock, one event queue, the ZooKeeper model and the
network between it and the members.

Everything happens in one thread, in the order of (time, sequence): a run is a function of
its seed. The network delivers a member's requests to the ensemble in the order it sent
them, and their replies in that order too (ZooKeeper's FIFO client order). A request whose
path is cut may or may not have been applied: its reply is a `ConnectionLoss` either way.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sim.zkmodel import SessionExpired, WatchEvent, ZkError, ZkModel

EPOCH = 1_772_323_200.0  # 2026-03-01T00:00:00Z: simulated time starts here
CALL_TIMEOUT = 1.0  # a request into a cut path fails after this long


class ConnectionLoss(ZkError):
    """The reply did not come back: the request may or may not have been applied."""


class Client(Protocol):
    """What the network needs of a member."""

    name: str
    incarnation: int

    def watch_fired(self, event: WatchEvent) -> None: ...


@dataclass
class NetworkFaults:
    """Knobs the scenario turns while it runs."""

    latency: tuple[float, float] = (0.0005, 0.01)  # one way, uniform
    lost_reply: float = 0.0  # chance that an applied request's reply is lost
    slow_reply: float = 0.0  # chance of a reply delayed by 0.1-1 s
    outage_until: float = -1.0  # the whole ensemble is unreachable until then
    cut_until: dict[str, float] = field(default_factory=dict)  # member -> path cut until


class World:
    def __init__(self, seed: int, tick: float = 0.5, trace: int = 0) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.t = EPOCH
        self.zk = ZkModel(tick)
        self.net = NetworkFaults()
        self.trace: deque[tuple[float, str, str]] = deque(maxlen=None if trace <= 0 else trace)
        self.expired_at: dict[int, float] = {}
        self.sessions: dict[int, Client] = {}  # session -> the member that opened it
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._last_arrival: dict[str, float] = {}
        self._last_reply: dict[str, float] = {}
        self.requests = 0
        self.tracing = False

    # -- the clock ------------------------------------------------------------------------

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self.t), self._seq, fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.t + delay, fn, *args)

    def run_until(self, end: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= end:
            when, _, fn, args = heapq.heappop(heap)
            self.t = when
            fn(*args)
        self.t = end

    def note(self, who: str, text: str) -> None:
        if self.tracing:
            self.trace.append((self.t, who, text))

    # -- the ensemble -----------------------------------------------------------------------

    def up(self) -> bool:
        return self.t >= self.net.outage_until

    def reachable(self, client: Client, at: float | None = None) -> bool:
        """Whether the client and the ensemble can talk now (or at `at`, as far as the
        faults set so far say)."""
        at = self.t if at is None else at
        return at >= self.net.outage_until and at >= self.net.cut_until.get(client.name, -1.0)

    def arrival(self, client: Client) -> float:
        """When a request the client sends now reaches the ensemble (in the order sent)."""
        name = client.name
        at = self.t + self.rng.uniform(*self.net.latency)
        at = max(at, self._last_arrival.get(name, 0.0) + 1e-6)
        self._last_arrival[name] = at
        return at

    def reply(self, client: Client) -> float:
        """When a reply the ensemble sends now reaches the client (in the order sent); a
        slow reply takes 0.1-1 s more."""
        delay = self.rng.uniform(*self.net.latency)
        if self.rng.random() < self.net.slow_reply:
            delay += self.rng.uniform(0.1, 1.0)
        at = max(self.t + delay, self._last_reply.get(client.name, 0.0) + 1e-6)
        self._last_reply[client.name] = at
        return at

    def server_tick(self) -> None:
        """Server-side session expiry (not while the ensemble is down: a new leader gives
        every session a fresh timeout, as ZooKeeper's session tracker does)."""
        if self.up():
            for session in self.zk.expire_due(self.t):
                self.expired_at[session] = self.t
                self.note("zk", f"session {session} expired")
            self.deliver_events()
        self.after(0.1, self.server_tick)

    def outage(self, seconds: float) -> None:
        self.net.outage_until = max(self.net.outage_until, self.t + seconds)
        self.note("zk", f"ensemble down for {seconds:.1f}s")
        self.at(self.net.outage_until, self._outage_over)

    def _outage_over(self) -> None:
        if self.up():
            for session in list(self.sessions):
                if self.zk.alive(session):
                    self.zk.touch(session, self.t)

    def request(
        self,
        client: Client,
        session: int | None,
        apply: Callable[[ZkModel], Any],
        on_reply: Callable[[Any], None],
    ) -> None:
        """Send `apply` to the ensemble on `session` (None: needs none, e.g. a connect);
        `on_reply` gets its result, or the ZkError it raised, or ConnectionLoss."""
        self.requests += 1
        incarnation = client.incarnation
        if not self.reachable(client):
            self.after(CALL_TIMEOUT, self._reply, client, incarnation, on_reply, ConnectionLoss())
            return
        self.at(self.arrival(client), self._arrive, client, incarnation, session, apply, on_reply)

    def _arrive(
        self,
        client: Client,
        incarnation: int,
        session: int | None,
        apply: Callable[[ZkModel], Any],
        on_reply: Callable[[Any], None],
    ) -> None:
        result: Any
        if not self.reachable(client):
            result = ConnectionLoss()
        else:
            try:
                if session is not None:
                    self.zk.touch(session, self.t)
                result = apply(self.zk)
            except ZkError as exc:
                result = exc
            self.deliver_events()
            if self.rng.random() < self.net.lost_reply:
                result = ConnectionLoss()
        self.at(self.reply(client), self._reply_if_reachable, client, incarnation, on_reply, result)

    def _reply_if_reachable(
        self, client: Client, incarnation: int, on_reply: Callable[[Any], None], result: Any
    ) -> None:
        if not self.reachable(client):
            result = ConnectionLoss()
        self._reply(client, incarnation, on_reply, result)

    @staticmethod
    def _reply(
        client: Client, incarnation: int, on_reply: Callable[[Any], None], result: Any
    ) -> None:
        if client.incarnation == incarnation:
            on_reply(result)

    def deliver_events(self) -> None:
        """Hand the watch events the ensemble queued to their clients (after a latency)."""
        for session, client in list(self.sessions.items()):
            events = self.zk.take_events(session)
            if not events:
                if not self.zk.alive(session):
                    del self.sessions[session]
                continue
            incarnation = client.incarnation
            for event in events:
                delay = self.rng.uniform(*self.net.latency)
                self.after(delay, self._watch, client, incarnation, event)

    def _watch(self, client: Client, incarnation: int, event: WatchEvent) -> None:
        """Delivered once the path is whole again: TCP loses nothing while the connection
        lives, and on a new connection the server fires the watches of whatever changed
        since (kazoo re-registers them); a watch of an expired session is gone."""
        if client.incarnation != incarnation or not self.zk.alive(event.session):
            return
        if self.reachable(client):
            client.watch_fired(event)
            return
        healed = max(self.net.outage_until, self.net.cut_until.get(client.name, -1.0))
        self.at(healed + 1e-6, self._watch, client, incarnation, event)


def expired(result: object) -> bool:
    return isinstance(result, SessionExpired)
