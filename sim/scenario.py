"""One seeded run of the cluster simulator: members, jobs, faults, then the verdict.

A seed decides everything: how many members (3-5) and their clocks' skew, the jobs (every
second to every minute, skip or allow, each catch-up policy and window, jitter, commands
shorter or longer than their period), and the faults, one every few seconds until the
quiet end: crashes (some right after a claim lands, before its command starts), SIGTERMs,
short and long partitions, lost and slow replies, ensemble outages, job table changes
(pause, resume, overlap, schedule, delete, re-add) and triggers. The last minute is quiet,
so that every catch-up has happened when the checker looks. The same seed gives the same
run, event for event.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from sim.checker import Limits, Verdict, check
from sim.ledger import Ledger, Table
from sim.member import SimMember
from sim.shell_log import shell_errors
from sim.world import EPOCH, World
from zksched.core.fire import model as m
from zksched.core.firekey import format_utc
from zksched.core.jobspec import JobSpec

SCHEDULES = (
    "* * * * * *",
    "* * * * * *",
    "*/2 * * * * *",
    "*/3 * * * * *",
    "*/5 * * * * *",
    "*/10 * * * * *",
    "*/30 * * * * *",
    "0 * * * * *",
)
QUIET = 60.0  # faults stop this long before the end
# how often each kind of fault comes, relative to the others
FAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {
        "crash": 3,
        "sigterm": 2,
        "short-cut": 3,
        "long-cut": 2,
        "lost": 2,
        "slow": 1,
        "outage": 1,
        "table": 4,
        "trigger": 3,
        "claim-crash": 2,
    }
)
# jobs further from their next fire than this keep no machine: above the lease lead (10 s),
# below the slowest schedule's period, so that the simulated members' jobs go dormant and
# wake all the time (the daemon's 5 minutes would leave only one-off jobs dormant here)
DORMANT_HORIZON = 15.0
SESSION_TIMEOUT = 3.0


@dataclass
class SimConfig:
    seed: int
    minutes: float = 10.0
    faults: bool = True
    fault_every: float = 6.0  # mean seconds between faults
    # a workload that stresses one kind of fault (e.g. a planted bug's search): FAULT_WEIGHTS
    # with these weights in place of theirs
    fault_weights: Mapping[str, float] = field(default_factory=dict)
    tunables: m.FireTunables = field(
        default_factory=lambda: m.FireTunables(dormant_horizon=DORMANT_HORIZON)
    )
    trace: bool = False


@dataclass
class SimResult:
    seed: int
    verdict: Verdict
    wall: float
    simulated: float
    members: int
    jobs: int
    requests: int
    trace: list[tuple[float, str, str]]

    @property
    def ok(self) -> bool:
        return not self.verdict.violations


class SimScenario:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.world = World(config.seed)
        self.world.tracing = config.trace
        self.rng = random.Random(config.seed * 7919 + 1)
        self.ledger = Ledger()
        self.end = EPOCH + config.minutes * 60.0
        self.hosts: list[SimMember] = []
        self._pids = 100
        self._version = 0
        self._jobs = 0
        self.long_jobs: set[str] = set()
        self.flaky_jobs: set[str] = set()  # jobs whose runs fail often (and that retry)
        zk = self.world.zk
        operator = self._operator()
        for path in ("/members", "/jobs", "/triggers", "/fires", "/locks"):
            zk.create(operator, path)

    def _operator(self) -> int:
        """A session of the operator's CLI, for one change (it never expires meanwhile)."""
        return self.world.zk.open_session(10.0, self.world.t)

    # -- set-up ---------------------------------------------------------------------------

    def _new_job(self, table: Table) -> None:
        rng = self.rng
        self._jobs += 1
        name = f"job{self._jobs}"
        schedule = rng.choice(SCHEDULES)
        if rng.random() < 0.1:  # a one-off job, due within the next minutes
            at = datetime.fromtimestamp(int(self.world.t + rng.uniform(2.0, 240.0)), UTC)
            schedule = "@at " + format_utc(at)
        spec = JobSpec(
            name=name,
            schedule=schedule,
            command=("true",),
            overlap=rng.choice(("skip", "skip", "allow")),
            catchup=rng.choice(("latest", "all", "none")),
            catchup_window=float(rng.choice((5, 20, 60, 300))),
            jitter=rng.choice((0.0, 0.0, 0.0, 0.8, 3.0)),
            labels={"role": "db"} if rng.random() < 0.15 else {},
            history=1000,
            retries=rng.choice((0, 0, 0, 1, 3)),
            retry_backoff=rng.choice((0.2, 1.0, 5.0)),
            delivery=rng.choice(("at-most-once", "at-most-once", "at-least-once")),
        )
        if rng.random() < 0.3:
            self.long_jobs.add(name)
        if spec.retries and rng.random() < 0.7:
            self.flaky_jobs.add(name)
        table[name] = (spec, self.world.t)

    def _publish(self, table: Table) -> None:
        self._version += 1
        self.ledger.publish(self._version, dict(table), self.world.t)
        self.world.zk.set(self._operator(), "/jobs", str(self._version).encode())
        self.world.note("operator", f"job table v{self._version}")

    def run_of(self, job: str) -> tuple[float, str]:
        """How a run of `job` goes: how long it takes, and whether it fails (a third of
        the flaky jobs' runs, a few of the others')."""
        rng = self.world.rng
        if job in self.long_jobs:
            seconds = rng.uniform(0.5, 4.0) if rng.random() < 0.8 else rng.uniform(4.0, 20.0)
        else:
            seconds = rng.uniform(0.01, 0.3)
        failing = rng.random() < (0.35 if job in self.flaky_jobs else 0.03)
        return seconds, "failed" if failing else "ok"

    def _boot(self, slot: int) -> None:
        old = self.hosts[slot]
        if old.alive:
            return  # came back already (another fault's restart)
        self._pids += 1
        member = SimMember(
            self.world,
            self.ledger,
            f"h{slot}-{self._pids}",
            old.skew,
            old.labels,
            SESSION_TIMEOUT,
            self.config.tunables,
            self.run_of,
        )
        self.hosts[slot] = member
        self.ledger.labels[member.name] = member.labels
        member.boot()

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> SimResult:
        began = time.perf_counter()
        rng = self.rng
        table: Table = {}
        for _ in range(rng.randint(5, 9)):
            self._new_job(table)
        self._publish(table)
        self.world.server_tick()
        for slot in range(rng.randint(3, 5)):
            labels = {"role": "db"} if slot == 0 or rng.random() < 0.3 else {}
            skew = rng.uniform(-2.0, 2.0) if rng.random() < 0.5 else 0.0
            placeholder = SimMember(
                self.world,
                self.ledger,
                f"h{slot}-0",
                skew,
                labels,
                SESSION_TIMEOUT,
                self.config.tunables,
                self.run_of,
            )
            self.hosts.append(placeholder)
            self.world.at(self.world.t + rng.uniform(0.0, 2.0), self._boot, slot)
        if self.config.faults:
            t = self.world.t + 5.0
            while True:
                t += rng.expovariate(1.0 / self.config.fault_every)
                if t >= self.end - QUIET:
                    break
                self.world.at(t, self._fault)
        self.world.at(self.end - QUIET + 1.0, self._settle)
        with shell_errors(self.world) as logged:
            try:
                self.world.run_until(self.end)
                failed = None
            except Exception as exc:  # a bug of the simulator's (or one the shell let out)
                failed = exc
        if failed is not None:
            verdict = Verdict()
            when = f"t+{self.world.t - EPOCH:.3f}s"
            verdict.add("exception", type(failed).__name__, None, f"{failed} at {when}")
            return SimResult(
                self.config.seed,
                verdict,
                time.perf_counter() - began,
                self.world.t - EPOCH,
                len(self.hosts),
                self._jobs,
                self.world.requests,
                list(self.world.trace),
            )
        pending: dict[str, datetime] = {}
        for member in self.hosts:
            if member.alive:
                for name, machine in member.core.jobs.items():
                    since = machine.pending_since()
                    if since is not None and (name not in pending or since < pending[name]):
                        pending[name] = since
        verdict = check(
            self.ledger,
            self.world.zk,
            self.world.expired_at,
            Limits(
                SESSION_TIMEOUT,
                2.0,
                self.end - QUIET,
                self.end,
                pending,
                self.config.tunables.orphan_interval,
            ),
        )
        for text in logged.found:  # an exception the shell logged: a bug
            verdict.add("exception", "shell", None, text)
        return SimResult(
            self.config.seed,
            verdict,
            time.perf_counter() - began,
            self.end - EPOCH,
            len(self.hosts),
            self._jobs,
            self.world.requests,
            list(self.world.trace),
        )

    def _settle(self) -> None:
        """The quiet end: every member up, the network whole."""
        net = self.world.net
        net.lost_reply = net.slow_reply = 0.0
        net.cut_until.clear()
        for slot, member in enumerate(self.hosts):
            member.crash_after_claim = False
            if not member.alive:
                self._boot(slot)

    def _fault(self) -> None:
        rng, world = self.rng, self.world
        live = [i for i, h in enumerate(self.hosts) if h.alive and not h.stopping]
        weights = {**FAULT_WEIGHTS, **self.config.fault_weights}
        kind = rng.choices(tuple(weights), tuple(weights.values()))[0]
        if kind in ("crash", "sigterm", "short-cut", "long-cut", "claim-crash") and not live:
            return
        if kind == "claim-crash":  # dies right after its next claim lands, before the start
            slot = rng.choice(live)
            self.hosts[slot].crash_after_claim = True
            world.note(self.hosts[slot].name, "armed: crash after the next claim")
            world.after(1.0, self._claim_crashed, slot, self.hosts[slot], world.t + 10.0)
        elif kind == "crash":
            slot = rng.choice(live)
            self.hosts[slot].crash()
            world.after(rng.uniform(1.0, 8.0), self._boot, slot)
        elif kind == "sigterm":
            slot = rng.choice(live)
            self.hosts[slot].sigterm(rng.uniform(0.2, 4.0))
            world.after(rng.uniform(5.0, 9.0), self._restart, slot)
        elif kind in ("short-cut", "long-cut"):
            member = self.hosts[rng.choice(live)]
            span = (0.3, 0.7) if kind == "short-cut" else (1.2, 3.0)
            seconds = rng.uniform(*span) * SESSION_TIMEOUT
            world.net.cut_until[member.name] = world.t + seconds
            world.note(member.name, f"path cut for {seconds:.2f}s")
        elif kind in ("lost", "slow"):
            attr = "lost_reply" if kind == "lost" else "slow_reply"
            setattr(world.net, attr, rng.uniform(0.05, 0.3))
            world.after(rng.uniform(2.0, 8.0), setattr, world.net, attr, 0.0)
            world.note("net", f"{attr} on")
        elif kind == "outage":
            world.outage(rng.uniform(1.0, 6.0))
        elif kind == "table":
            self._change_table()
        else:
            self._trigger()

    def _claim_crashed(self, slot: int, member: SimMember, give_up: float) -> None:
        if not member.alive:
            self.world.after(self.rng.uniform(1.0, 8.0), self._boot, slot)
        elif self.world.t >= give_up:
            member.crash_after_claim = False  # no claim of its landed meanwhile
        else:
            self.world.after(1.0, self._claim_crashed, slot, member, give_up)

    def _restart(self, slot: int) -> None:
        if not self.hosts[slot].alive:
            self._boot(slot)
        else:
            self.world.after(1.0, self._restart, slot)

    def _change_table(self) -> None:
        rng = self.rng
        table = dict(self.ledger.table_at(self.world.t))
        names = sorted(table)
        what = rng.choice(("pause", "overlap", "schedule", "delete", "add", "window"))
        if what == "add" or not names:
            self._new_job(table)
        else:
            name = rng.choice(names)
            spec, _ = table[name]
            changes: dict[str, Any]
            if what == "pause":
                changes = {"paused": not spec.paused}
            elif what == "overlap":
                changes = {"overlap": "allow" if spec.overlap == "skip" else "skip"}
            elif what == "schedule":
                changes = {"schedule": rng.choice(SCHEDULES)}
            elif what == "window":
                changes = {
                    "catchup_window": float(rng.choice((5, 20, 60))),
                    "catchup": rng.choice(("latest", "all", "none")),
                }
            else:
                del table[name]
                changes = {}
            if changes:
                table[name] = (dataclasses.replace(spec, **changes), self.world.t)
        self._publish(table)

    def _trigger(self) -> None:
        table = self.ledger.table_at(self.world.t)
        if not table:
            return
        job = self.rng.choice(sorted(table))
        self.world.zk.create(self._operator(), f"/triggers/{job}.", sequential=True)
        self.world.note("operator", f"trigger {job}")


def simulate(config: SimConfig) -> SimResult:
    return SimScenario(config).run()
