"""`scripts/chaos`: break a zksched cluster on purpose and check what the SPEC promises.

Each scenario starts its own cluster (a local ZooKeeper or a 3-server ensemble, N `zksched run`
subprocesses logging JSON, and a job file of fast jobs whose commands record their fire keys),
injects its faults for the given duration with a seeded random generator, lets catch-up settle,
and judges the evidence the commands themselves wrote:

- duplicates: a fire key recorded more than once (anywhere in the run);
- gaps: an expected instant of the measured span (a moment after start to the end of the
  faults) that never ran; an instant whose claim exists but whose command never started (a
  member killed between claim and start: at-most-once by design) is `abandoned`, not a gap;
- failover: from the signal (or a partition's start) to the first fire, on another member, of
  a job the victim had been firing.

Then `zksched audit --since ... --json` gives its own verdict when that command exists.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from zksched.core.durations import parse_duration
from zksched.core.firekey import format_utc, parse_fire_key
from zksched.core.fires import FireRecord
from zksched.core.schedule import Schedule
from zksched.devtools.daemonproc import DaemonProcess
from zksched.devtools.faultproxy import BLACKHOLE, DELAY, PASS, FaultProxy
from zksched.devtools.zkserver import ZkEnsemble, ZkServer
from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

HOSTNAME = socket.gethostname()
CALL_TIMEOUT = 5.0
# Catch-up must cover every outage a scenario makes, so that span checks can be exact.
CATCHUP_WINDOW = "10m"
# One line per fire, appended by one bash `echo` (atomic for lines this short); $EPOCHREALTIME
# is bash's own clock, so recording costs no extra process.
RECORD_SCRIPT = (
    'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID $ZKSCHED_FENCING_TOKEN $EPOCHREALTIME" >> {out}'
)


# -- the cluster under test -----------------------------------------------------------------


@dataclass
class Member(DaemonProcess):
    """One `zksched run` subprocess of a chaos run (with its own fault proxy when it needs
    one, and its clock shifted by `--clock-offset` when asked)."""

    clock_offset: float = 0.0
    proxy: FaultProxy | None = None


@dataclass
class Cluster:
    """ZooKeeper (standalone or ensemble), the members, the job file and the fire log."""

    workdir: Path
    servers: list[ZkServer]
    ensemble: bool
    session_timeout: float
    client_id: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:8]}")
    members: list[Member] = field(default_factory=list)
    every_member: list[Member] = field(default_factory=list)
    _observer: KazooClient | None = None

    @classmethod
    def start(cls, workdir: Path, *, ensemble: bool, session_timeout: float) -> Cluster:
        workdir.mkdir(parents=True, exist_ok=True)
        if ensemble:
            servers = ZkEnsemble.create(workdir / "zk", size=3).servers
        else:
            servers = [ZkServer(workdir / "zk")]
        cluster = cls(workdir, servers, ensemble, session_timeout)
        try:
            for server in servers:
                server.start()
            for server in servers:
                server.wait_serving(60)
        except BaseException:
            cluster.close()
            raise
        return cluster

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    @property
    def fire_log(self) -> Path:
        return self.workdir / "fires.log"

    @property
    def paths(self) -> ClusterPaths:
        return ClusterPaths(self.client_id)

    def observer(self) -> KazooClient:
        """The suite's own ZooKeeper client (for reading members and fire records)."""
        if self._observer is None:
            client = KazooClient(hosts=self.connect_string, timeout=10)
            client.start(timeout=30)
            self._observer = client
        return self._observer

    def zksched(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "zksched", "--zk", self.connect_string]
        return subprocess.run(
            [*command, "--client-id", self.client_id, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def apply(self, job_file_text: str) -> None:
        path = self.workdir / "jobs.toml"
        path.write_text(job_file_text)
        done = self.zksched("jobs", "apply", str(path))
        if done.returncode != 0:
            raise RuntimeError(f"jobs apply failed ({done.returncode}): {done.stderr.strip()}")

    def start_member(self, *, proxied: bool = False, clock_offset: float = 0.0) -> Member:
        proxy = None
        hosts = self.connect_string
        if proxied:
            if self.ensemble:
                raise ValueError("proxied members need a standalone server")
            proxy = FaultProxy(("127.0.0.1", self.servers[0].client_port)).start()
            hosts = proxy.address
        log_path = self.workdir / f"member-{len(self.every_member)}.log"
        member = Member(
            hosts,
            self.client_id,
            log_path,
            self.session_timeout,
            run_args=["--clock-offset", str(clock_offset)] if clock_offset else [],
            env={k: v for k, v in os.environ.items() if not k.startswith("ZKSCHED_")},
            clock_offset=clock_offset,
            proxy=proxy,
        ).start()
        self.members.append(member)
        self.every_member.append(member)
        return member

    def kill(self, member: Member) -> float:
        sent = member.send(signal.SIGKILL)
        member.wait(10)
        self.members.remove(member)
        return sent

    def terminate(self, member: Member, *, wait_exit: bool = True) -> float:
        sent = member.send(signal.SIGTERM)
        self.members.remove(member)
        if wait_exit:
            try:
                member.wait(30)
            except subprocess.TimeoutExpired:
                member.send(signal.SIGKILL)
                member.wait(10)
        return sent

    def leader(self) -> ZkServer | None:
        for server in self.servers:
            if server.running and server.mode() == "leader":
                return server
        return None

    def live_member_ids(self) -> list[str]:
        try:
            names = wait(self.observer().get_children_async(self.paths.members), CALL_TIMEOUT)
        except (NoNodeError, KazooException, KazooTimeoutError):
            return []
        return sorted(ClusterPaths.member_id_of(n) for n in names)

    def wait_registered(self, member: Member, timeout: float) -> None:
        until(lambda: member.member_id in self.live_member_ids(), timeout, member.member_id)

    def wait_members(self, expected: Iterable[Member], timeout: float) -> None:
        """Until exactly these members are registered."""
        members = list(expected)
        want = sorted(m.member_id for m in members)

        def registered() -> bool:
            for member in members:
                if not member.alive:  # e.g. it could not start: say why at once
                    tail = member.log_path.read_text(errors="replace").strip().splitlines()[-1:]
                    raise RuntimeError(f"member {member.member_id} exited: {''.join(tail)}")
            return self.live_member_ids() == want

        until(registered, timeout, f"members {want}")

    def fire_record(self, job: str, instant: str) -> FireRecord | None:
        try:
            raw, _ = wait(self.observer().get_async(self.paths.fire(job, instant)), CALL_TIMEOUT)
        except NoNodeError:
            return None
        try:
            return FireRecord.from_json(raw)
        except (ValueError, TypeError):
            return None

    def close(self) -> None:
        for member in list(self.every_member):
            if member.alive:
                member.send(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for member in self.every_member:
            with contextlib.suppress(subprocess.TimeoutExpired):
                member.wait(max(0.1, deadline - time.monotonic()))
            if member.alive:
                member.send(signal.SIGKILL)
                member.wait(10)
            # a command the daemon started lives in its own process group: ours to clean up
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(member.pid, signal.SIGKILL)
            if member.proxy is not None:
                member.proxy.stop()
        if self._observer is not None:
            with contextlib.suppress(Exception):
                self._observer.stop()
                self._observer.close()
            self._observer = None
        for server in self.servers:
            server.stop(kill=True)


def until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)


# -- jobs and evidence ----------------------------------------------------------------------


def recording_jobs(
    names: Iterable[str],
    out: Path,
    *,
    schedule: str = "* * * * * *",
    overlap: str = "skip",
    history: int = 1000,
) -> str:
    """A job file: each job appends `<fire key> <member> <token> <start epoch>` to `out`."""
    script = RECORD_SCRIPT.format(out=out)
    lines = []
    for name in names:
        lines += [
            f"[jobs.{name}]",
            f'schedule = "{schedule}"',
            f"command = ['/bin/bash', '-c', '{script}']",
            'catchup = "all"',
            f'catchup_window = "{CATCHUP_WINDOW}"',
            f'overlap = "{overlap}"',
            'timeout = "30s"',
            f"history = {history}",
            "",
        ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Fire:
    job: str
    instant: float  # epoch seconds of the scheduled instant
    member_id: str
    token: int
    started: float  # epoch seconds, the command's own clock


def read_fires(path: Path) -> list[Fire]:
    fires: list[Fire] = []
    if not path.exists():
        return fires
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue  # a line cut short by a kill: not evidence either way
        job, instant = parse_fire_key(parts[0])
        fires.append(Fire(job, instant.timestamp(), parts[1], int(parts[2]), float(parts[3])))
    return fires


@dataclass(frozen=True)
class FaultEvent:
    """A member stopped (graceful or not) or cut off at `at` (epoch seconds)."""

    member_id: str
    at: float
    graceful: bool


def failover_time(event: FaultEvent, fires: list[Fire]) -> float | None:
    """How late, after the fault, the victim's jobs ran again elsewhere (the worst job).

    The victim's jobs are those whose last fire in the two seconds before the fault was its.
    For each, the first fire on another member counts from the fault, or from that fire's own
    instant when it fell due after the fault: an every-second job whose victim had just fired
    would otherwise add up to a second of waiting for its next instant to any handover.
    None when the victim was firing nothing.
    """
    last: dict[str, Fire] = {}
    for fire in sorted(fires, key=lambda f: f.started):
        if event.at - 2.0 <= fire.started <= event.at:
            last[fire.job] = fire
    victim_jobs = {job for job, fire in last.items() if fire.member_id == event.member_id}
    if not victim_jobs:
        return None
    worst = 0.0
    for job in victim_jobs:
        after = [
            f
            for f in fires
            if f.job == job and f.member_id != event.member_id and f.started > event.at
        ]
        if not after:
            return float("inf")
        first = min(after, key=lambda f: f.started)
        worst = max(worst, first.started - max(event.at, first.instant))
    return worst


# -- scenarios ------------------------------------------------------------------------------


@dataclass
class ScenarioContext:
    cluster: Cluster
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

    def pick_victim(self) -> Member:
        """A random member among those that fired something in the last two seconds (with a
        few jobs a member may own none, and faulting it would show nothing)."""
        recent = {
            f.member_id for f in read_fires(self.cluster.fire_log) if f.started > time.time() - 2
        }
        busy = [m for m in self.cluster.members if m.member_id in recent]
        return self.rng.choice(busy or self.cluster.members)

    def time_left(self, started: float) -> float:
        return self.duration - (time.monotonic() - started)

    def sleep(self, seconds: float, started: float) -> None:
        """Sleep, but never past the end of the fault phase."""
        time.sleep(max(0.0, min(seconds, self.time_left(started))))


@dataclass(frozen=True)
class Scenario:
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
    second to start on a busy host), so every step is a real join and a real leave.
    """
    started = time.monotonic()
    previous: Member | None = None
    steps = 0
    while True:
        tick = time.monotonic()
        newcomer = ctx.cluster.start_member()
        ctx.cluster.wait_registered(newcomer, 30)
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


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("kill9", "kill -9 of random members, each restarted after the takeover", kill9),
        Scenario("rolling", "SIGTERM rolling restart of every member, one by one", rolling),
        Scenario(
            "partition",
            "a member blackholed from ZooKeeper shorter than, then longer than, its session",
            partition,
            proxied=True,
        ),
        Scenario(
            "ensemble-leader",
            "the leader of a 3-server ensemble killed (and back), then another server",
            ensemble_leader,
            ensemble=True,
        ),
        Scenario("zk-outage", "every ZooKeeper server down for 10 s, then back", zk_outage),
        Scenario(
            "slow-zk",
            "ZooKeeper slowed by a proxy, 200 ms each way",
            slow_zookeeper,
            proxied=True,
            # a fire then takes ~2 s of round trips; with overlap = skip the next instant
            # would be skipped `still-running` by design, which is not what this probes
            overlap="allow",
        ),
        Scenario(
            "clock-skew",
            "members with clocks 2-3 s apart, jobs handed between them by restarts",
            clock_skew,
            clock_offsets=skewed_offsets,
        ),
        Scenario(
            "burst",
            "2,000 jobs due at the same instant (every 20 s) on the members",
            burst,
            job_count=2000,
            schedule="*/20 * * * * *",
            history=20,
        ),
        Scenario("flapping", "a member joining and another leaving every second", flapping),
    )
}


@dataclass
class ScenarioResult:
    scenario: str
    seed: int
    duration_s: float
    members: int
    session_timeout_s: float
    span: tuple[str, str] = ("", "")
    expected: int = 0  # instants in the measured span
    fires: int = 0  # fires recorded, whole run
    duplicates: int = 0
    gaps: int = 0
    abandoned: int = 0
    missing: list[str] = field(default_factory=list)  # a few gaps/abandoned, with why
    crash_failover_s: list[float] = field(default_factory=list)
    graceful_failover_s: list[float] = field(default_factory=list)
    delay_ms: dict[str, float] = field(default_factory=dict)
    audit: str = "not run"
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    workdir: str = ""

    @property
    def passed(self) -> bool:
        return not self.failures


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _expected(schedule: Schedule, names: list[str], low: float, high: float) -> set[str]:
    start, end = datetime.fromtimestamp(low, UTC), datetime.fromtimestamp(high, UTC)
    instants = [format_utc(i) for i in schedule.fires_between(start, end)]
    return {f"{name}@{instant}" for name in names for instant in instants}


def _recorded_keys(path: Path) -> Counter[str]:
    keys: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                keys[parts[0]] += 1
    return keys


def _warm_up(cluster: Cluster, names: list[str], every_second: bool) -> None:
    """Until every member has loaded the job table and (fast jobs) every job has fired."""

    def loaded() -> bool:
        return all(
            any(e.get("jobs") == len(names) for e in m.events("jobs")) for m in cluster.members
        )

    until(loaded, 120, "every member to load the job table")
    if every_second:
        since = time.time()

        def all_fired() -> bool:
            return {f.job for f in read_fires(cluster.fire_log) if f.started > since} >= set(names)

        until(all_fired, 30, "every job to fire once")


def run_audit(cluster: Cluster, since: float) -> tuple[str, list[str]]:
    """`zksched audit`'s verdict in one line, and the fire keys it calls gaps (a few)."""
    iso = format_utc(datetime.fromtimestamp(int(since), UTC))
    try:
        done = cluster.zksched("audit", "--since", iso, "--json", timeout=120)
    except subprocess.TimeoutExpired:
        return "audit timed out", []
    if done.returncode != 0 and "No such command" in done.stderr:
        return "audit unavailable", []
    try:
        data = json.loads(done.stdout)
        totals = data.get("totals", {})
        verdict = "clean" if data.get("clean") else "NOT clean"
        shown = ", ".join(
            f"{k} {totals[k]}" for k in ("ran", "gaps", "duplicates", "abandoned") if k in totals
        )
        gaps = [f"{j['name']}@{g}" for j in data.get("jobs", []) for g in j.get("gaps", [])]
        return (f"{verdict} ({shown})" if shown else verdict), gaps[:5]
    except (ValueError, AttributeError, KeyError, TypeError):
        first = (done.stderr.strip() or done.stdout.strip()).splitlines()[:1]
        return f"audit failed (exit {done.returncode}): {first[0] if first else ''}", []


def run_scenario(
    scenario: Scenario,
    *,
    duration: float,
    seed: int,
    members: int = 3,
    session_timeout: float = 3.0,
    workdir: Path,
) -> ScenarioResult:
    """Start a cluster, inject the scenario's faults for `duration` seconds, judge the evidence."""
    rng = random.Random(f"{seed}:{scenario.name}")
    result = ScenarioResult(scenario.name, seed, duration, members, session_timeout)
    result.workdir = str(workdir)
    cluster = Cluster.start(workdir, ensemble=scenario.ensemble, session_timeout=session_timeout)
    try:
        prefix = "burst" if scenario.job_count > 100 else "job"
        names = [f"{prefix}-{i:04d}" for i in range(scenario.job_count)]
        cluster.apply(
            recording_jobs(
                names,
                cluster.fire_log,
                schedule=scenario.schedule,
                overlap=scenario.overlap,
                history=scenario.history,
            )
        )
        offsets = scenario.clock_offsets(rng, members) if scenario.clock_offsets else []
        for i in range(members):
            cluster.start_member(
                proxied=scenario.proxied, clock_offset=offsets[i] if offsets else 0.0
            )
        if offsets:
            result.notes.append("clock offsets " + ", ".join(f"{o:+.2f}s" for o in offsets))
        cluster.wait_members(cluster.members, 60)
        _warm_up(cluster, names, every_second=scenario.schedule == "* * * * * *")
        span_from = float(int(time.time()) + 1)
        ctx = ScenarioContext(cluster, rng, duration, members)
        try:
            scenario.inject(ctx)
        except Exception as exc:  # the evidence so far is still judged
            result.failures.append(f"fault injection failed: {type(exc).__name__}: {exc}")
        span_to = float(int(time.time()))
        result.notes += ctx.notes
        result.span = (
            format_utc(datetime.fromtimestamp(span_from, UTC)),
            format_utc(datetime.fromtimestamp(span_to, UTC)),
        )
        expected = _expected(Schedule.parse(scenario.schedule), names, span_from, span_to)
        result.expected = len(expected)
        # catch-up runs what the faults left behind; give it the time a takeover may take
        settle = session_timeout + 15 + (0.05 * len(expected) if scenario.job_count > 100 else 0)
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and expected - set(_recorded_keys(cluster.fire_log)):
            time.sleep(0.25)
        time.sleep(1.0)  # a late duplicate would show now
        result.audit, audit_gaps = run_audit(cluster, span_from)
        _judge(result, ctx, cluster, expected)
        recorded = _recorded_keys(cluster.fire_log)
        for key in audit_gaps:  # where the audit and the commands' own evidence disagree
            ran = f"ran {recorded[key]}x per the fire file" if key in recorded else "not run"
            result.missing.append(f"audit gap {key}: {ran}")
    finally:
        cluster.close()
    return result


def _judge(
    result: ScenarioResult, ctx: ScenarioContext, cluster: Cluster, expected: set[str]
) -> None:
    fires = read_fires(cluster.fire_log)
    counts = _recorded_keys(cluster.fire_log)
    result.fires = sum(counts.values())
    dups = {k: n for k, n in counts.items() if n > 1}
    result.duplicates = sum(n - 1 for n in dups.values())
    for key in sorted(dups)[:5]:
        result.missing.append(f"{key} ran {dups[key]} times")
    alive = {m.member_id for m in cluster.members if m.alive}
    for key in sorted(expected - set(counts)):
        job, instant = key.split("@", 1)
        try:
            record = cluster.fire_record(job, instant)
        except (KazooException, KazooTimeoutError):
            record = None
        if record is not None and record.state == "running" and record.member_id not in alive:
            result.abandoned += 1
            why = f"abandoned (claimed by {record.member_id}, which died before starting it)"
        else:
            result.gaps += 1
            why = (
                f"gap ({record.state}: {record.skip_reason}, by {record.member_id})"
                if record
                else "gap (no claim)"
            )
        if len(result.missing) < 12:
            result.missing.append(f"{key} {why}")
    in_span = [
        f
        for f in fires
        if f"{f.job}@{format_utc(datetime.fromtimestamp(f.instant, UTC))}" in expected
    ]
    delays = [(f.started - f.instant) * 1000 for f in in_span]
    if delays:
        result.delay_ms = {
            "p50": round(_percentile(delays, 0.5), 1),
            "p99": round(_percentile(delays, 0.99), 1),
            "max": round(max(delays), 1),
        }
    for fault in ctx.faults:
        took = failover_time(fault, fires)
        if took is None:
            continue
        (result.graceful_failover_s if fault.graceful else result.crash_failover_s).append(
            round(took, 3)
        )
    if result.duplicates:
        result.failures.append(f"{result.duplicates} duplicate fires")
    if result.gaps:
        result.failures.append(f"{result.gaps} gaps")
    if ctx.check_failover:
        crash_bound = cluster.session_timeout + 1.0
        slow = [t for t in result.crash_failover_s if t > crash_bound]
        if slow:
            result.failures.append(f"crash failover {max(slow):.2f}s > {crash_bound:g}s")
        slow = [t for t in result.graceful_failover_s if t >= 1.0]
        if slow:
            result.failures.append(f"graceful handover {max(slow):.2f}s >= 1s")


# -- command line ---------------------------------------------------------------------------


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f}/{max(values):.2f}"


def format_table(results: list[ScenarioResult]) -> str:
    header = (
        "scenario", "fires", "dups", "gaps", "abandoned", "crash p50/max s",
        "graceful p50/max s", "delay p50/p99 ms", "audit", "verdict",
    )  # fmt: skip
    rows = [header]
    for r in results:
        delay = f"{r.delay_ms['p50']:.0f}/{r.delay_ms['p99']:.0f}" if r.delay_ms else "-"
        rows.append(
            (
                r.scenario,
                str(r.fires),
                str(r.duplicates),
                str(r.gaps),
                str(r.abandoned),
                _stats(r.crash_failover_s),
                _stats(r.graceful_failover_s),
                delay,
                r.audit,
                "PASS" if r.passed else "FAIL: " + "; ".join(r.failures),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    )


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/chaos",
        description="Break a zksched cluster on purpose: "
        + "; ".join(f"{name}: {s.summary}" for name, s in SCENARIOS.items()),
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="names, or all")
    parser.add_argument(
        "--duration", default="30s", help="total fault time, shared by the scenarios (30s, 10m)"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--session-timeout", type=float, default=3.0, metavar="S")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write results as JSON")
    parser.add_argument("--workdir", help="keep every log here (default: a temporary folder)")
    args = parser.parse_args(argv)
    names = args.scenarios or ["all"]
    if "all" in names:
        names = list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    try:
        args.duration_s = parse_duration(args.duration)
    except ValueError as exc:
        parser.error(f"--duration: {exc}")
    if args.members < 2:
        parser.error("--members must be at least 2 (a fault needs a survivor)")
    args.names = names
    return args


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    # the suite's own client reconnects through every outage it causes: no noise about it
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    # SIGTERM or SIGINT (ignored by default in a background job) still tear clusters down
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    share = args.duration_s / len(args.names)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="zksched-chaos-"))
    print(
        f"chaos: seed {seed}, {share:g}s per scenario, {args.members} members, "
        f"session timeout {args.session_timeout:g}s, logs in {base}",
        file=sys.stderr,
    )
    results = []
    for name in args.names:
        print(f"chaos: {name} ...", file=sys.stderr, flush=True)
        began = time.monotonic()
        try:
            result = run_scenario(
                SCENARIOS[name],
                duration=share,
                seed=seed,
                members=args.members,
                session_timeout=args.session_timeout,
                workdir=base / name,
            )
        except Exception as exc:  # a cluster that would not start: say so, go on
            result = ScenarioResult(name, seed, share, args.members, args.session_timeout)
            result.failures.append(f"{type(exc).__name__}: {exc}")
        results.append(result)
        print(
            f"chaos: {name} {'PASS' if result.passed else 'FAIL'} "
            f"in {time.monotonic() - began:.0f}s",
            file=sys.stderr,
            flush=True,
        )
        for line in result.missing:
            print(f"  {line}", file=sys.stderr)
    print(format_table(results))
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(
                {
                    "seed": seed,
                    "date": format_utc(datetime.now(UTC)),
                    "host": HOSTNAME,
                    "cpus": os.cpu_count(),
                    "results": [asdict(r) | {"passed": r.passed} for r in results],
                },
                indent=2,
            )
            + "\n"
        )
    if not args.workdir and all(r.passed for r in results):
        shutil.rmtree(base, ignore_errors=True)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
