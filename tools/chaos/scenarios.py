"""The chaos scenarios: one function each that injects its faults into a running cluster
for the given duration, and `SCENARIOS`, the registry `scripts/chaos` offers."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tools.chaos.evidence import FaultEvent, last_firers, read_fires
from tools.chaos.lab import ChaosCluster, ChaosMember, until
from tools.faultproxy import BLACKHOLE, DELAY, PASS


@dataclass
class ScenarioContext:
    cluster: ChaosCluster
    rng: random.Random
    duration: float
    members: int
    faults: list[FaultEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # A graceful handover is bounded at 1 s, a crash at the session timeout plus 1 s.
    check_failover: bool = True

    @property
    def session_timeout(self) -> float:
        return self.cluster.session_timeout

    def pick_victim(self) -> ChaosMember:
        """A random member among those that fired some job last in the last two seconds,
        the rule the verdict finds a victim's jobs by (with a few jobs a member may own none,
        and faulting it would show nothing; one that merely fired something may have handed
        it on since, as a member does while others join); waits up to 10 s for one (a busy
        machine can be slow to start the first fires)."""
        deadline = time.monotonic() + 10.0
        while True:
            owners = set(last_firers(read_fires(self.cluster.fire_log), time.time()).values())
            busy = [m for m in self.cluster.members if m.member_id in owners]
            if busy or time.monotonic() >= deadline:
                return self.rng.choice(busy or self.cluster.members)
            time.sleep(0.2)

    def time_left(self, started: float) -> float:
        return self.duration - (time.monotonic() - started)

    def sleep(self, seconds: float, started: float) -> None:
        """Sleep, but never past the end of the fault phase."""
        time.sleep(max(0.0, min(seconds, self.time_left(started))))


@dataclass(frozen=True)
class ChaosScenario:
    name: str
    summary: str
    inject: Callable[[ScenarioContext], None]
    ensemble: bool = False
    proxied: bool = False  # every member connects through its own fault proxy
    job_count: int = 6
    schedule: str = "* * * * * *"
    overlap: str = "skip"
    history: int = 1000
    clock_offsets: Callable[[random.Random, int], list[float]] | None = None


def kill9(ctx: ScenarioContext) -> None:
    """SIGKILL a random member, restart it once its session has expired; repeat."""
    started = time.monotonic()
    while True:
        time.sleep(ctx.rng.uniform(1.5, 3.0))
        victim = ctx.pick_victim()
        ctx.faults.append(FaultEvent(victim.member_id, ctx.cluster.kill(victim), graceful=False))
        # the replacement joins only after the takeover, so that it cannot hide a slow one
        time.sleep(ctx.session_timeout + ctx.rng.uniform(1.0, 2.0))
        ctx.cluster.start_member()
        ctx.cluster.wait_members(ctx.cluster.members, 30)
        if ctx.time_left(started) <= 0:
            return


def rolling(ctx: ScenarioContext) -> None:
    """SIGTERM every member one by one, each replaced before the next goes (a rolling upgrade)."""
    started = time.monotonic()
    while True:
        for victim in list(ctx.cluster.members):
            sent = ctx.cluster.terminate(victim)
            ctx.faults.append(FaultEvent(victim.member_id, sent, graceful=True))
            time.sleep(ctx.rng.uniform(1.0, 2.0))
            ctx.cluster.start_member()
            ctx.cluster.wait_members(ctx.cluster.members, 30)
            time.sleep(ctx.rng.uniform(0.5, 1.5))
        if ctx.time_left(started) <= 0:
            return


def partition(ctx: ScenarioContext) -> None:
    """Blackhole one member's path to ZooKeeper: shorter than its session timeout, then longer."""
    started = time.monotonic()
    while True:
        victim = ctx.pick_victim()
        assert victim.proxy is not None
        short = ctx.session_timeout * ctx.rng.uniform(0.4, 0.7)
        victim.proxy.set_mode(BLACKHOLE)
        time.sleep(short)
        victim.proxy.set_mode(PASS)
        ctx.notes.append(f"{victim.member_id} cut off {short:.1f}s")
        # A short cut can still cost the session: kazoo's reconnect may sit in a connection
        # accepted during the blackhole until its connect timeout. So the long cut picks its
        # victim afresh among members firing once the cluster has settled.
        ctx.cluster.wait_members(ctx.cluster.members, 30)
        time.sleep(ctx.rng.uniform(2.0, 3.0))
        victim = ctx.pick_victim()
        assert victim.proxy is not None
        long = ctx.session_timeout * ctx.rng.uniform(1.5, 2.5)
        cut = time.time()
        victim.proxy.set_mode(BLACKHOLE)
        # to the others a partition past the session timeout is a crash
        ctx.faults.append(FaultEvent(victim.member_id, cut, graceful=False))
        time.sleep(long)
        victim.proxy.set_mode(PASS)
        ctx.notes.append(f"{victim.member_id} cut off {long:.1f}s")
        ctx.cluster.wait_members(ctx.cluster.members, 30)
        time.sleep(ctx.rng.uniform(2.0, 3.0))
        if ctx.time_left(started) <= 0:
            return


def partition_overlap(ctx: ScenarioContext) -> None:
    """One member cut off past its session while another is cut off briefly, its short cut
    ending just before the first one's session can expire: the expired member's jobs that
    move to the member coming back must still run within the session timeout plus 1 s."""
    started = time.monotonic()
    timeout = ctx.session_timeout
    while True:
        gone = ctx.pick_victim()
        back = ctx.rng.choice([m for m in ctx.cluster.members if m is not gone])
        assert gone.proxy is not None and back.proxy is not None
        long = timeout * ctx.rng.uniform(1.5, 2.5)
        short = timeout * ctx.rng.uniform(0.4, 0.7)
        cut = time.time()
        gone.proxy.set_mode(BLACKHOLE)
        ctx.faults.append(FaultEvent(gone.member_id, cut, graceful=False))
        # the short cut heals 0.1-0.5 s before the long one's session can expire
        time.sleep(max(0.0, timeout - short - ctx.rng.uniform(0.1, 0.5)))
        back.proxy.set_mode(BLACKHOLE)
        time.sleep(short)
        back.proxy.set_mode(PASS)
        time.sleep(max(0.0, cut + long - time.time()))
        gone.proxy.set_mode(PASS)
        ctx.notes.append(
            f"{gone.member_id} cut off {long:.1f}s, {back.member_id} {short:.1f}s in it"
        )
        ctx.cluster.wait_members(ctx.cluster.members, 30)
        time.sleep(ctx.rng.uniform(2.0, 3.0))
        if ctx.time_left(started) <= 0:
            return


def ensemble_leader(ctx: ScenarioContext) -> None:
    """Kill the ensemble's leader and bring it back; then another server, and back."""
    started = time.monotonic()
    while True:
        first = until(ctx.cluster.leader, 30, "an ensemble leader")
        for victim in (first, None):
            if victim is None:  # "another server": whichever leads now, else any other one
                leader = until(ctx.cluster.leader, 30, "an ensemble leader")
                others = [s for s in ctx.cluster.servers if s is not first]
                victim = leader if leader is not first else ctx.rng.choice(others)
            role = victim.mode()
            victim.stop(kill=True)
            down = ctx.rng.uniform(3.0, 5.0)
            time.sleep(down)
            victim.start()
            victim.wait_serving(60)
            ctx.notes.append(f"server {victim.server_id} ({role}) down {down:.1f}s")
            time.sleep(ctx.rng.uniform(2.0, 3.0))
        if ctx.time_left(started) <= 0:
            return


def zk_outage(ctx: ScenarioContext) -> None:
    """Every ZooKeeper server down for 10 s, then back with its data."""
    started = time.monotonic()
    while True:
        time.sleep(ctx.rng.uniform(1.0, 2.0))
        for server in ctx.cluster.servers:
            server.stop(kill=True)
        time.sleep(10.0)
        for server in ctx.cluster.servers:
            server.start()
        for server in ctx.cluster.servers:
            server.wait_serving(60)
        ctx.notes.append("ZooKeeper down 10s")
        ctx.cluster.wait_members(ctx.cluster.members, 60)
        time.sleep(ctx.rng.uniform(3.0, 5.0))
        if ctx.time_left(started) <= 0:
            return


def slow_zookeeper(ctx: ScenarioContext) -> None:
    """Every member's ZooKeeper traffic delayed 200 ms each way."""
    started = time.monotonic()
    for member in ctx.cluster.members:
        assert member.proxy is not None
        member.proxy.set_mode(DELAY, 0.2)
    ctx.sleep(ctx.duration, started)
    for member in ctx.cluster.members:
        assert member.proxy is not None
        member.proxy.set_mode(PASS)


def skewed_offsets(rng: random.Random, members: int) -> list[float]:
    """Clocks spread evenly over +-2..3 s, in a random order."""
    spread = rng.uniform(2.0, 3.0)
    offsets = [
        round(-spread + 2 * spread * i / max(1, members - 1), 2) if members > 1 else spread
        for i in range(members)
    ]
    rng.shuffle(offsets)
    return offsets


def clock_skew(ctx: ScenarioContext) -> None:
    """Members with clocks seconds apart; jobs handed between them by graceful restarts."""
    # A handover to a member whose clock is behind waits for that clock by design, so the
    # handover bound is not judged here; duplicates and gaps are.
    ctx.check_failover = False
    started = time.monotonic()
    while True:
        time.sleep(ctx.rng.uniform(2.0, 4.0))
        victim = ctx.rng.choice(ctx.cluster.members)
        ctx.cluster.terminate(victim)
        ctx.cluster.start_member(clock_offset=victim.clock_offset)
        ctx.notes.append(f"restarted the member {victim.clock_offset:+.2f}s off")
        ctx.cluster.wait_members(ctx.cluster.members, 30)
        if ctx.time_left(started) <= 0:
            return


def burst(ctx: ScenarioContext) -> None:
    """2,000 jobs due at the same instants; the members just have to keep up."""
    ctx.check_failover = False
    ctx.sleep(ctx.duration, time.monotonic())


def flapping(ctx: ScenarioContext) -> None:
    """An extra member joins and the previous extra one leaves, every second.

    Each newcomer is waited for until it has registered (a Python process takes most of a
    second to start on a busy host), and for up to 10 s until it has run a job, unless the
    owner table gives it none (on a loaded host a takeover takes seconds), so every step is
    a real join and a real leave, of a member that was firing when it won any job.
    """
    started = time.monotonic()
    previous: ChaosMember | None = None
    steps = 0
    while True:
        tick = time.monotonic()
        newcomer = ctx.cluster.start_member()
        ctx.cluster.wait_registered(newcomer, 30)
        deadline = time.monotonic() + 10
        while not ctx.cluster.firing_or_idle(newcomer) and time.monotonic() < deadline:
            time.sleep(0.1)
        if previous is not None:
            sent = ctx.cluster.terminate(previous, wait_exit=False)
            ctx.faults.append(FaultEvent(previous.member_id, sent, graceful=True))
            steps += 1
        previous = newcomer
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        if ctx.time_left(started) <= 0:
            break
    assert previous is not None
    sent = ctx.cluster.terminate(previous, wait_exit=False)
    ctx.faults.append(FaultEvent(previous.member_id, sent, graceful=True))
    ctx.cluster.wait_members(ctx.cluster.members, 30)
    ctx.notes.append(f"{steps + 1} members joined and left, {steps} joins while another left")


SCENARIOS: dict[str, ChaosScenario] = {
    s.name: s
    for s in (
        ChaosScenario(
            "kill9", "kill -9 of random members, each restarted after the takeover", kill9
        ),
        ChaosScenario("rolling", "SIGTERM rolling restart of every member, one by one", rolling),
        ChaosScenario(
            "partition",
            "a member blackholed from ZooKeeper shorter than, then longer than, its session",
            partition,
            proxied=True,
        ),
        ChaosScenario(
            "partition-overlap",
            "a member cut off past its session while another recovers from a short cut",
            partition_overlap,
            proxied=True,
        ),
        ChaosScenario(
            "ensemble-leader",
            "the leader of a 3-server ensemble killed (and back), then another server",
            ensemble_leader,
            ensemble=True,
        ),
        ChaosScenario("zk-outage", "every ZooKeeper server down for 10 s, then back", zk_outage),
        ChaosScenario(
            "slow-zk",
            "ZooKeeper slowed by a proxy, 200 ms each way",
            slow_zookeeper,
            proxied=True,
            # a fire then takes ~2 s of round trips; with overlap = skip the next instant
            # would be skipped `still-running` by design, which is not what this probes
            overlap="allow",
        ),
        ChaosScenario(
            "clock-skew",
            "members with clocks 2-3 s apart, jobs handed between them by restarts",
            clock_skew,
            clock_offsets=skewed_offsets,
        ),
        ChaosScenario(
            "burst",
            "2,000 jobs due at the same instant (every 20 s) on the members",
            burst,
            job_count=2000,
            schedule="*/20 * * * * *",
            history=20,
            # on a starved host 2,000 starts can fall 20 s behind; with overlap = skip the
            # next instant is then skipped `still-running` by design: this probes that every
            # instant runs once however late, how fast is for `scripts/bench scale`'s burst
            overlap="allow",
        ),
        ChaosScenario("flapping", "a member joining and another leaving every second", flapping),
    )
}
