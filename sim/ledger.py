"""The ground truth of a simulated run: what the commands did, what the job table said and
when, which member took which trigger. The members write it; the checker reads it."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sim.world import World
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec

Table = dict[str, tuple[JobSpec, float]]


class MemberView(Protocol):
    """What the ledger reads of the member that started a run or took a trigger."""

    world: World
    name: str
    incarnation: int
    session: int | None
    last_heard: float


@dataclass
class Run:
    """One command run: its fire, the member (session, fencing token) that started it, when
    (true time and the member's clock), and how it ended."""

    job: str
    instant: datetime
    kind: str
    member: str
    session: int
    token: int
    started: float  # true time
    local_started: float
    ended: float | None = None
    status: str = ""
    attempt: int = 1  # > 1: a retry of the same fire (same claim, same token)


@dataclass
class TriggerTake:
    node: str
    job: str
    member: str
    incarnation: int
    session: int
    at: float


@dataclass
class Ledger:
    tables: dict[int, Table] = field(default_factory=dict)
    table_times: list[float] = field(default_factory=list)  # when each version was written
    table_versions: list[int] = field(default_factory=list)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    silence_at_start: dict[int, float] = field(default_factory=dict)  # id(run) -> seconds
    takes: list[TriggerTake] = field(default_factory=list)
    deaths: dict[str, list[float]] = field(default_factory=dict)  # member -> crash/stop times
    actions: Counter[str] = field(default_factory=Counter)
    claims: dict[tuple[str, datetime], tuple[str, float]] = field(default_factory=dict)
    claim_sent: dict[tuple[str, datetime], float] = field(default_factory=dict)  # the last
    # member -> [(when, connected)]: each change of the connection as its core was told
    links: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)

    def claimed(self, job: str, instant: datetime, member: str, at: float) -> None:
        """Our claim's reply came back CREATED (the at-most-once window opens)."""
        self.claims[(job, instant)] = (member, at)

    def withdrawn(self, job: str, instant: datetime) -> None:
        """Our unstarted claim's record was deleted: the instant has no claim now."""
        self.claims.pop((job, instant), None)

    def link(self, member: str, at: float, connected: bool) -> None:
        changes = self.links.setdefault(member, [])
        if not changes or changes[-1][1] != connected:
            changes.append((at, connected))

    def connected_for(self, member: str, start: float, end: float) -> float:
        """How long, within [start, end], the member's core was told it was connected."""
        total, up_since = 0.0, None
        for at, connected in self.links.get(member, []):
            if connected and up_since is None:
                up_since = at
            elif not connected and up_since is not None:
                total += max(0.0, min(at, end) - max(up_since, start))
                up_since = None
        if up_since is not None:
            total += max(0.0, end - max(up_since, start))
        return total

    def publish(self, version: int, table: Table, at: float) -> None:
        self.tables[version] = table
        self.table_times.append(at)
        self.table_versions.append(version)

    def table_at(self, t: float) -> Table:
        i = bisect.bisect_right(self.table_times, t) - 1
        return self.tables[self.table_versions[max(i, 0)]]

    def tables_between(self, start: float, end: float) -> list[Table]:
        """Every table in force at some moment of [start, end]."""
        first = max(bisect.bisect_right(self.table_times, start) - 1, 0)
        last = max(bisect.bisect_right(self.table_times, end) - 1, 0)
        return [self.tables[self.table_versions[i]] for i in range(first, last + 1)]

    def started(self, run: Run, member: MemberView) -> None:
        self.runs.append(run)
        self.silence_at_start[id(run)] = member.world.t - member.last_heard

    def ended(self, run: Run, at: float, status: str) -> None:
        if run.ended is None:
            run.ended, run.status = at, status

    def trigger_taken(self, node: str, member: MemberView) -> None:
        job = node.rsplit(".", 1)[0]
        self.takes.append(
            TriggerTake(
                node, job, member.name, member.incarnation, member.session or 0, member.world.t
            )
        )

    def trigger_returned(self, node: str) -> None:
        """Its taker handed it back (the job moved): the new node's take counts instead."""
        self.takes = [t for t in self.takes if t.node != node]

    def died(self, member: str, at: float) -> None:
        self.deaths.setdefault(member, []).append(at)

    def count(self, action: m.Action) -> None:
        self.actions[type(action).__name__] += 1
