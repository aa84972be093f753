"""Where a simulated member's fire shell runs: the simulator's `Host` (zksched/runtime/host.py).

The production shell (zksched/runtime/fire) hands its ZooKeeper work to pools. Here a pool's
job is a request on its way: it runs when it reaches the ensemble (after the network's
latency, in the order sent), all at once against the ZooKeeper model, and what it posts to
the engine, or submits next, reaches the member after the reply's latency. The ZooKeeper
calls inside it (`SimHost.call`) meet the network: a member cut off fails every call
(ConnectionLoss, known after the call timeout); the connection can drop during a job (as
often as the network loses replies): one of its first calls applies and its reply is lost,
the calls after it fail; and a job sent by a member that died since lands its first call
only (the one on the wire). Commands start on `starters`, after the process table's start
delay. The engine's inbox wakes the member for a turn; its timers and chores get turns of
their own.
"""

from __future__ import annotations

import math
import queue
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo import exceptions as kz

from sim.world import CALL_TIMEOUT, World
from sim.zkmodel import (
    BadArguments,
    BadVersion,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
    Op,
    OpResult,
    RolledBack,
    SessionExpired,
    Stat,
    ZkError,
    ZkModel,
)
from zksched.runtime.clock import Clock
from zksched.runtime.host import Executor, Step

if TYPE_CHECKING:
    from sim.member.base import MemberBase

T = TypeVar("T")

CHORES_EVERY = 1.0  # the engine's thread wakes at least this often (its queue's timeout)
DROP_WITHIN = 6  # a connection drop during a job comes at one of its first calls

_KAZOO: dict[type[ZkError], type[Exception]] = {
    NoNode: kz.NoNodeError,
    NodeExists: kz.NodeExistsError,
    BadVersion: kz.BadVersionError,
    NotEmpty: kz.NotEmptyError,
    RolledBack: kz.RolledBackError,
    NoChildrenForEphemerals: kz.NoChildrenForEphemeralsError,
    BadArguments: kz.BadArgumentsError,
}


def kazoo_error(error: ZkError) -> Exception:
    """The model's error as kazoo raises it (what the production shell catches)."""
    kind: type[Exception] = _KAZOO.get(type(error), kz.ZookeeperError)
    return kind(str(error))


class SimClock(Clock):
    """A member's clock: simulated time plus its skew."""

    world: World

    def __init__(self, world: World, skew: float) -> None:
        super().__init__(skew)
        object.__setattr__(self, "world", world)

    def now(self) -> float:
        return self.world.t + self.offset

    def monotonic(self) -> float:
        return self.world.t


@dataclass
class Request:
    """A job of the shell's ZooKeeper pools, from its send to its reply."""

    session: int | None  # the connection's session when it was sent
    sent: float
    reply_at: float = 0.0
    cut: bool = False  # the member and the ensemble could not talk
    first_only: bool = False  # its member died since it was sent
    calls: int = 0
    lost_at: int = 0  # the call whose reply is lost, the connection dropping (0: none)
    heard: bool = False  # a call was answered (the session lives)
    expired: bool = False  # a call was told the session expired
    posts: list[Any] = field(default_factory=list)  # to the engine's inbox, at the reply
    then: list[tuple[Callable[..., object], tuple[Any, ...]]] = field(default_factory=list)


class SimHost:
    """One member's host: its clock, its pools, its engine's inbox and turns."""

    def __init__(self, member: MemberBase, start_delay: Callable[[], float]) -> None:
        self._member = member
        self.world = member.world
        self._clock = SimClock(member.world, member.skew)
        self._start_delay = start_delay
        self.current: Request | None = None  # the job running now
        self.queue = SimInbox(self)
        self._turn_due = False
        self._timer_at = math.inf

    @property
    def member(self) -> MemberBase:
        return self._member

    # -- Host -------------------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self._clock

    def pool(self, name: str, threads: int) -> Executor:
        return _Pool(self.request)

    def starters(self, name: str, threads: int) -> Executor:
        return _Pool(self._start)

    def inbox(self) -> SimInbox:
        return self.queue

    def worker(self, name: str, step: Step) -> Callable[[], None]:
        return _Worker(self, step).wake

    # -- requests ---------------------------------------------------------------------------

    def request(self, fn: Callable[..., object], *args: Any) -> None:
        """Send a job: it runs at the ensemble (a job's own sends go once its reply is in)."""
        if self.current is not None:
            self.current.then.append((fn, args))
            return
        member, world = self._member, self.world
        if not member.alive:
            return
        world.requests += 1
        job = Request(member.session, world.t)
        if world.reachable(member):
            world.at(world.arrival(member), self._run, job, fn, args)
        else:
            job.cut = True
            world.at(world.t + CALL_TIMEOUT, self._run, job, fn, args)

    def _run(self, job: Request, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
        member, world = self._member, self.world
        job.first_only = not member.alive
        job.reply_at = world.t if job.cut else world.reply(member)
        job.lost_at = self._drop()
        self.current = job
        try:
            fn(*args)
        finally:
            self.current = None
        if member.alive:
            at = max(job.reply_at, job.sent + CALL_TIMEOUT) if job.cut else job.reply_at
            world.at(at, self._answered, job)

    def _answered(self, job: Request) -> None:
        member = self._member
        if not member.alive:
            return
        if job.session == member.session and job.session is not None:
            if job.expired:
                member.session_expired()
            elif job.heard:
                member.heard()
        for item in job.posts:
            self.queue.put(item)
        for fn, args in job.then:
            self.request(fn, *args)

    def call(self, apply: Callable[[ZkModel, int], T]) -> T:
        """One ZooKeeper call of the running job (or, outside any, of the engine's own
        thread, answered at once). Raises kazoo's errors, as the daemon's calls do."""
        job = self.current
        if job is None:
            job = Request(self._member.session, self.world.t, self.world.t)
            job.lost_at = self._drop()
            try:
                return self._call(job, apply)
            finally:
                if job.expired or job.heard:
                    self.world.after(0.0, self._answered, job)
        return self._call(job, apply)

    def _drop(self) -> int:
        """Whether the connection drops during a job: 0, or at which of its calls."""
        rng = self.world.rng
        return rng.randint(1, DROP_WITHIN) if rng.random() < self.world.net.lost_reply else 0

    def _call(self, job: Request, apply: Callable[[ZkModel, int], T]) -> T:
        world, member = self.world, self._member
        if (job.first_only and job.calls) or (job.lost_at and job.calls >= job.lost_at):
            raise kz.ConnectionLoss()  # the connection is gone for the rest of the job
        job.calls += 1
        if job.cut or job.session is None or not world.reachable(member):
            job.cut = True
            raise kz.ConnectionLoss()
        zk, error = world.zk, None
        try:
            zk.touch(job.session, world.t)
            result = apply(zk, job.session)
        except SessionExpired as exc:
            job.expired = True
            raise kz.SessionExpiredError() from exc
        except ZkError as exc:
            error = exc
        finally:
            world.deliver_events()
        if not world.reachable(member, job.reply_at):
            job.cut = True  # cut off before its reply came: known after the call timeout
            raise kz.ConnectionLoss()
        if job.calls == job.lost_at:
            raise kz.ConnectionLoss()  # its reply is lost (whatever it did stays done)
        job.heard = True
        if error is not None:
            raise kazoo_error(error) from error
        return result

    def session(self) -> int | None:
        """The session of the running job's connection."""
        job = self.current
        return self._member.session if job is None else job.session

    # -- starts -----------------------------------------------------------------------------

    def _start(self, fn: Callable[..., object], *args: Any) -> None:
        self.world.after(self._start_delay(), self._started, fn, args)

    def _started(self, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
        if self._member.alive:  # else: killed between its claim and its start
            fn(*args)

    # -- the engine's turns -----------------------------------------------------------------

    def wake(self) -> None:
        if not self._turn_due:
            self._turn_due = True
            self.world.after(0.0, self.turn)

    def turn(self) -> None:
        self._turn_due = False
        member = self._member
        if not member.alive:
            return
        member.engine.turn(0.0)
        if self.queue:
            self.wake()
        due = member.engine.next_due()
        if due is not None:
            at = due - member.skew + 1e-6  # the member's clock, read back, reaches `due`
            if at < self._timer_at or self._timer_at <= self.world.t:
                self._timer_at = at
                self.world.at(at, self._timer, at)

    def _timer(self, at: float) -> None:
        if at == self._timer_at:
            self._timer_at = math.inf
            self.turn()

    def beat(self) -> None:
        """The engine's thread wakes at least every second (its chores: results and lock
        nodes left to retry)."""
        if self._member.alive:
            self.turn()
            self.world.after(CHORES_EVERY, self.beat)


class _Pool:
    """An `Executor` whose jobs go where `send` says."""

    def __init__(self, send: Callable[..., None]) -> None:
        self._send = send

    def submit(self, fn: Callable[..., object], /, *args: Any) -> object:
        self._send(fn, *args)
        return None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


class SimInbox:
    """The engine's queue: what a job posts waits for the job's reply; anything else wakes
    the member for a turn."""

    def __init__(self, host: SimHost) -> None:
        self._host = host
        self._items: deque[Any] = deque()

    def __bool__(self) -> bool:
        return bool(self._items)

    def put(self, item: Any) -> None:
        job = self._host.current
        if job is not None:
            job.posts.append(item)
            return
        self._items.append(item)
        self._host.wake()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return self.get_nowait()

    def get_nowait(self) -> Any:
        if not self._items:
            raise queue.Empty
        return self._items.popleft()


class _Worker:
    """A host worker (the result writer's loop): each step a job of its own."""

    def __init__(self, host: SimHost, step: Step) -> None:
        self._host = host
        self._step = step
        self._due = False

    def wake(self) -> None:
        if not self._due:
            self._due = True
            self._host.request(self._run)

    def _run(self) -> None:
        self._due = False
        pause = self._step()
        if pause is None:
            return
        if pause <= 0:
            self.wake()  # sent once this job's reply is in
            return
        self._due = True
        self._host.world.after(pause, self._again)

    def _again(self) -> None:
        self._due = False
        self.wake()


# -- the calls the stores make (each one request) ----------------------------------------------


def get(path: str) -> Callable[[ZkModel, int], tuple[bytes, Stat]]:
    return lambda zk, s: zk.get(s, path)


def children(path: str) -> Callable[[ZkModel, int], list[str]]:
    return lambda zk, s: zk.get_children(s, path)


def exists(path: str, watch: bool = False) -> Callable[[ZkModel, int], Stat | None]:
    return lambda zk, s: zk.exists(s, path, watch)


def create(
    path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False
) -> Callable[[ZkModel, int], str]:
    return lambda zk, s: zk.create(s, path, data, ephemeral, sequential)


def create_stat(path: str, data: bytes) -> Callable[[ZkModel, int], Stat]:
    """A create that answers the node's Stat (kazoo's `include_data`)."""

    def apply(zk: ZkModel, session: int) -> Stat:
        zk.create(session, path, data)
        return zk.stat_of(path)

    return apply


def ensure(path: str) -> Callable[[ZkModel, int], str]:
    """Create `path` and its parents (NodeExists when it is there)."""
    return lambda zk, s: zk.create(s, path, makepath=True)


def set_data(path: str, data: bytes, version: int = -1) -> Callable[[ZkModel, int], Stat]:
    return lambda zk, s: zk.set(s, path, data, version)


def delete(path: str, version: int = -1) -> Callable[[ZkModel, int], None]:
    return lambda zk, s: zk.delete(s, path, version)


def multi(ops: list[Op]) -> Callable[[ZkModel, int], list[OpResult]]:
    return lambda zk, s: zk.multi(s, ops)
