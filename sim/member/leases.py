"""The job locks in the ZooKeeper model: the simulator's `LeaseStore`
(zksched/runtime/fire/stores.py), as kazoo's lock recipe and zk/locks.py's `JobLock` do it.

A take creates an ephemeral sequential contender (its data: the take's tag) and holds the
lock once its contender sorts first; until then it watches the contender just before it
and waits (in simulated time) until that one goes or the take's wait is over: then it
deletes its contender and answers who holds the lock. A failed attempt clears this
session's contenders that no live take knows (a create whose reply was lost may have
landed, kazoo #732) and is tried once more while connected, as `JobLock.try_acquire` does.
A held lock's node is watched: its deletion is reported (`on_lost`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from sim.member.host import SimHost, create, delete, ensure, exists, get, multi
from sim.member.host import children as children_of
from sim.records import locks_of
from sim.zkmodel import Delete, Op, WatchEvent, ZkError
from zksched.zk.locks import LockAttempt, member_tag

LeaseTaken = Callable[[LockAttempt, "SimLock | None", str | None, bool], None]


class SimLock:
    """One take's contender: held once it came first."""

    def __init__(self, leases: SimLeases, job: str, tag: str) -> None:
        self._leases = leases
        self.job, self.tag = job, tag
        self.node: str | None = None
        self.held = False
        self.lost = False
        self._on_lost: Callable[[], None] | None = None

    def on_lost(self, callback: Callable[[], None] | None) -> None:
        self._on_lost = callback
        if callback is not None and self.lost:
            callback()

    def release_ops(self) -> str | None:
        return self.node if self.held and not self.lost else None

    def released(self) -> None:
        self.held = False
        self._leases.forget(self)

    def vanished(self) -> None:
        if self.held:
            self.lost = True
            if self._on_lost is not None:
                self._on_lost()


@dataclass
class _Take:
    lock: SimLock
    wait: float
    deadline: float
    then: LeaseTaken
    tries: int = 1


class SimLeases:
    def __init__(self, host: SimHost, member_id: str) -> None:
        self._host = host
        self._call = host.call
        self._member_tag = member_tag(member_id)
        self.registry: set[str] = set()  # tags of the locks held here and the takes under way
        self._folders: set[str] = set()
        self._held: dict[str, SimLock] = {}  # our lock nodes, watched
        self._waiting: dict[str, _Take] = {}  # the contender a take waits for -> the take
        self._takes = 0

    def folders_known(self, jobs: list[str]) -> bool:
        return all(job in self._folders for job in jobs)

    def ensure_folders(self, jobs: list[str]) -> None:
        for job in [j for j in jobs if j not in self._folders]:
            try:
                self._call(ensure(locks_of(job)))
            except NodeExistsError:
                pass
            except KazooException:
                continue
            self._folders.add(job)

    def acquire(self, job: str, wait: float, session: int, then: LeaseTaken) -> None:
        self._takes += 1
        lock = SimLock(self, job, f"{self._member_tag}{session:x}/{self._takes}")
        self._attempt(_Take(lock, wait, self._host.world.t + wait, then))

    def _attempt(self, take: _Take) -> None:
        lock = take.lock
        self.registry.add(lock.tag)
        folder, data = locks_of(lock.job), lock.tag.encode()
        prefix = f"{folder}/{lock.tag.replace('/', '_')}__lock__"
        try:
            if lock.job not in self._folders:
                with contextlib.suppress(NodeExistsError):
                    self._call(ensure(folder))
                self._folders.add(lock.job)
            lock.node = self._call(create(prefix, data, ephemeral=True, sequential=True))
        except KazooException:
            self._failed(take)
            return
        self._turn(take)

    def _turn(self, take: _Take) -> None:
        """Is our contender first? Else wait for the one before it, or give up."""
        lock, world = take.lock, self._host.world
        folder = locks_of(lock.job)
        try:
            children = self._call(children_of(folder))
            order = sorted(children, key=lambda c: c[-10:])
            mine = (lock.node or "").rsplit("/", 1)[-1]
            if mine not in order:  # gone (its session, say): the attempt failed
                self._failed(take)
                return
            at = order.index(mine)
            if at == 0:
                self._hold(take)
                return
            if world.t >= take.deadline:
                self._give_up(take)
                return
            before = f"{folder}/{order[at - 1]}"
            if self._call(exists(before, watch=True)) is None:
                self._turn(take)
                return
        except KazooException:
            self._give_up(take)
            return
        self._waiting[before] = take
        world.at(take.deadline, self._waited, before, take)

    def _hold(self, take: _Take) -> None:
        lock = take.lock
        assert lock.node is not None
        lock.held = True
        self._held[lock.node] = lock
        # not awaited (pipelined with the claim that follows): no watch, no harm
        with contextlib.suppress(KazooException):
            if self._call(exists(lock.node, watch=True)) is None:
                lock.lost = True
        take.then(LockAttempt.ACQUIRED, lock, None, False)

    def _give_up(self, take: _Take) -> None:
        """The wait is over (or a call failed): our contender goes (best effort)."""
        node = take.lock.node
        if node is not None:
            with contextlib.suppress(KazooException):
                self._call(delete(node))
        self._failed(take)

    def _failed(self, take: _Take) -> None:
        lock = take.lock
        self.registry.discard(lock.tag)
        lock.node = None
        orphan = not self.clear_orphans(lock.job)
        holder = self._holder(lock.job)
        if holder is not None:
            take.then(LockAttempt.HELD, None, holder, orphan)
        elif take.tries == 1 and self._host.world.reachable(self._host.member):
            take.tries, take.deadline = 2, self._host.world.t + take.wait
            self._attempt(take)
        else:
            take.then(LockAttempt.UNKNOWN, None, None, orphan)

    def _holder(self, job: str) -> str | None:
        """The tag of the contender that holds the lock; None when none or unknown."""
        folder = locks_of(job)
        try:
            children = self._call(children_of(folder))
            for child in sorted(children, key=lambda c: c[-10:]):
                try:
                    data, _ = self._call(get(f"{folder}/{child}"))
                except NoNodeError:
                    continue
                return data.decode(errors="replace") or child
        except KazooException:
            return None
        return None

    def _waited(self, before: str, take: _Take) -> None:
        if self._waiting.get(before) is take:
            del self._waiting[before]
            self._host.request(self._turn, take)

    def watch_fired(self, event: WatchEvent) -> None:
        lock = self._held.get(event.path)
        if lock is not None and event.kind == "deleted":
            lock.vanished()
        take = self._waiting.pop(event.path, None)
        if take is not None:
            self._host.request(self._turn, take)

    def forget(self, lock: SimLock) -> None:
        self.registry.discard(lock.tag)
        if lock.node is not None:
            self._held.pop(lock.node, None)

    def delete(self, nodes: list[str], together: bool = True) -> list[str]:
        if together and len(nodes) > 1:
            ops: list[Op] = [Delete(node) for node in nodes]
            try:
                results = self._call(multi(ops))
                if not any(isinstance(r, ZkError) for r in results):
                    return []
            except KazooException:
                pass
        kept = []
        for node in nodes:
            try:
                self._call(delete(node))
            except NoNodeError:
                pass
            except KazooException:
                kept.append(node)
        return kept

    def clear_orphans(self, job: str) -> bool:
        session = self._host.session()
        if session is None:
            return False
        folder = locks_of(job)
        try:
            children = self._call(children_of(folder))
            for child in children:
                path = f"{folder}/{child}"
                try:
                    data, stat = self._call(get(path))
                except NoNodeError:
                    continue
                tag = data.decode(errors="replace")
                ours = stat.ephemeral_owner == session and tag.startswith(self._member_tag)
                if ours and tag not in self.registry:
                    with contextlib.suppress(NoNodeError):
                        self._call(delete(path))
        except NoNodeError:
            return True
        except KazooException:
            return False
        return True
