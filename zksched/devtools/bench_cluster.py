"""Cluster benchmarks: each starts its own ZooKeeper and zksched members, and measures.

    fire-delay   scheduled instant -> command start, zksched members vs. APScheduler 3
    failover     SIGKILL / SIGTERM of a probe job's owner: time to its next fire, lost instants
    zk-requests  ZooKeeper requests per fire by type, with 1, 3 and 5 members
    scale        10k / 100k jobs: apply, ready, RSS, idle CPU, a burst of 2,000 at one instant
    profile      where the time on the fire path goes (phases, and cProfile of the fire threads)

Members are `zksched run` subprocesses logging JSON (their `fire` events carry scheduled,
claimed, started and finished timestamps), except where a measurement must be taken inside
the member (request counting, profiling): those run `Daemon`s in this process.
Registered into `bench.py`'s registry; results and commands are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import math
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zksched.core.fire.model import FireTunables
from zksched.core.firekey import format_utc
from zksched.devtools.bench import (
    BenchContext,
    Result,
    at_least,
    benchmark,
    markdown_table,
    progress,
)
from zksched.devtools.daemonproc import DaemonProcess
from zksched.devtools.zkserver import ZkServer
from zksched.runtime.daemon import DaemonConfig
from zksched.runtime.results import MAX_HOLD

SESSION_TIMEOUT = 4.0  # the peers were measured with 4 s
LEAD = FireTunables().lease_lead  # members take a job's lease this long before its fire


# --- shared pieces ------------------------------------------------------------------------


@contextlib.contextmanager
def own_zookeeper(workdir: Path) -> Iterator[str]:
    """A standalone ZooKeeper on a free port for one benchmark (forceSync=no, as in tests)."""
    server = ZkServer(workdir / "zookeeper")
    server.start()
    try:
        server.wait_serving(60)
        yield server.connect_string
    finally:
        server.stop(kill=True)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max by nearest rank, in the unit given; NaN-free (empty: zeros)."""
    if not values:
        return {"count": 0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    return {
        "count": len(ordered),
        "p50": round(rank(50), 3),
        "p95": round(rank(95), 3),
        "p99": round(rank(99), 3),
        "max": round(ordered[-1], 3),
    }


def ms_row(label: str, stats: Mapping[str, float]) -> list[str]:
    return [
        label,
        f"{int(stats['count']):,}",
        *(f"{stats[k]:.1f}" for k in ("p50", "p95", "p99", "max")),
    ]


def job_table(jobs: Mapping[str, Mapping[str, Any]]) -> str:
    """TOML for `jobs apply`: values are strings, lists of strings or integers."""

    def value(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(json.dumps(x) for x in v) + "]"
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v) if isinstance(v, str) else str(v)

    parts = []
    for name, keys in jobs.items():
        body = "".join(f"{k} = {value(v)}\n" for k, v in keys.items())
        parts.append(f"[jobs.{name}]\n{body}")
    return "\n".join(parts)


def zksched_cli(zk: str, client_id: str, *args: str, timeout: float = 600) -> float:
    """Run one `zksched` command; returns its wall time. Raises with its output on failure."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "zksched", "--zk", zk, "--client-id", client_id, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"zksched {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return elapsed


def apply_jobs(zk: str, client_id: str, workdir: Path, jobs: Mapping[str, Any]) -> float:
    path = workdir / f"jobs-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(job_table(jobs))
    return zksched_cli(zk, client_id, "jobs", "apply", "--prune", str(path))


@dataclass
class Member(DaemonProcess):
    """One `zksched run` subprocess of a benchmark (session timeout as the issue's peers)."""

    session_timeout: float = SESSION_TIMEOUT


@contextlib.contextmanager
def members(zk: str, client_id: str, workdir: Path, count: int) -> Iterator[list[Member]]:
    started = [Member(zk, client_id, workdir / f"member-{i}.log").start() for i in range(count)]
    try:
        wait_for(lambda: all(m.members_seen() == count for m in started), 60, "members to join")
        yield started
    finally:
        for m in started:
            m.stop()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def sleep_until(epoch: float) -> None:
    time.sleep(max(0.0, epoch - time.time()))


def ms_between(
    fires: Iterable[Mapping[str, Any]], since: str, until: str = "started_ts"
) -> list[float]:
    """Per fire event, milliseconds from its `since` to its `until` timestamp (epoch s)."""
    return [(float(e[until]) - float(e[since])) * 1000 for e in fires]


def fires_in(members_: Sequence[Member], start: float, end: float) -> list[dict[str, Any]]:
    """Fire events whose instant lies in [start, end)."""
    out = []
    for m in members_:
        out += [e for e in m.events("fire") if start <= float(e["scheduled_ts"]) < end]
    return out


def every_second_checks(
    fires: Sequence[Mapping[str, Any]], jobs: Sequence[str], start: float, end: float
) -> dict[str, int]:
    """Doubled and lost instants of every-second jobs over [start, end)."""
    counts = Counter(str(e["fire_key"]) for e in fires)
    expected = len(jobs) * (int(end) - int(start))
    return {
        "expected": expected,
        "fired": len(counts),
        "doubled": sum(1 for n in counts.values() if n > 1),
        "lost": expected - len(counts),
    }


# --- fire-delay: zksched vs. APScheduler 3 ----------------------------------------------------


def _fire_delay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=at_least(1), metavar="N", help="members (3)")
    parser.add_argument("--jobs", type=at_least(1), metavar="N", help="every-second jobs (500)")
    parser.add_argument("--seconds", type=at_least(1), metavar="S", help="measured window (30)")
    parser.add_argument("--runs", type=at_least(1), default=1, metavar="N", help="runs (1)")


def every_second_jobs(count: int, prefix: str) -> dict[str, dict[str, Any]]:
    return {
        f"{prefix}-{i:05d}": {"schedule": "* * * * * *", "command": ["true"]} for i in range(count)
    }


def measure_zksched_delay(
    zk: str, workdir: Path, n_members: int, n_jobs: int, seconds: int
) -> Result:
    client_id = f"fd-{uuid.uuid4().hex[:8]}"
    jobs = every_second_jobs(n_jobs, "fd")
    with members(zk, client_id, workdir, n_members) as group:
        apply_jobs(zk, client_id, workdir, jobs)
        # warm up until the members keep up: every job's lock taken (its first fires take
        # them, and on a slow machine 500 new jobs keep the members seconds behind for ten
        # seconds or more), pools and connections hot. Kept up: every job fired for a
        # second 5 s ago (its results are logged by then), each within 1 s of its instant.
        names = set(jobs)

        def kept_up() -> bool:
            second = math.floor(time.time()) - 5
            fires = [e for m in group for e in m.events("fire") if int(e["scheduled_ts"]) == second]
            late = ms_between(fires, "scheduled_ts")
            started = {e["job"] for e, ms in zip(fires, late, strict=True) if ms < 1000}
            if started == names:
                return True
            time.sleep(0.5)  # reading the logs is not free: not every 50 ms
            return False

        wait_for(kept_up, 120, "the members to keep up")
        start = math.ceil(time.time()) + 2
        end = start + seconds
        # a fire is logged once its result is written: up to MAX_HOLD after it ended while
        # fires due together keep coming (results.py)
        sleep_until(end + 2.0 + MAX_HOLD)
        fires = fires_in(group, start, end)
    return {
        "delay_ms": percentiles(ms_between(fires, "scheduled_ts")),
        "due_to_claimed_ms": percentiles(ms_between(fires, "scheduled_ts", "claimed_ts")),
        # claimed -> started: where a member killed with SIGKILL leaves its claim unstarted
        # (abandoned: at most once) — the failover's loss window
        "claimed_to_started_ms": percentiles(ms_between(fires, "claimed_ts")),
        **every_second_checks(fires, list(jobs), start, end),
    }


def measure_apscheduler_delay(n_jobs: int, seconds: int) -> Result:
    """The same jobs in one APScheduler 3 BackgroundScheduler (no coordination at all): the
    job function starts the same command the way zksched does (own process group, no shell) and
    returns the moment it started; scheduled_run_time comes from the event."""
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent  # type: ignore[import-untyped]
    from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-untyped]
    from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]
    from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

    def run_command() -> float:
        popen = subprocess.Popen(
            ["true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
            close_fds=True,
        )
        started = time.time()
        popen.communicate()
        return started

    results: list[tuple[str, float, float | None]] = []
    lock = threading.Lock()

    def on_event(event: JobExecutionEvent) -> None:
        started = event.retval if event.code == EVENT_JOB_EXECUTED else None
        with lock:
            results.append((event.job_id, event.scheduled_run_time.timestamp(), started))

    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(32)},  # zksched's default pool size
        job_defaults={"coalesce": False, "misfire_grace_time": 60, "max_instances": 3},
        timezone=UTC,
    )
    scheduler.add_listener(on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    for name in every_second_jobs(n_jobs, "ap"):
        scheduler.add_job(run_command, CronTrigger(second="*", timezone=UTC), id=name)
    scheduler.start()
    try:
        time.sleep(3)  # warm-up, as for zksched
        start = math.ceil(time.time()) + 1
        end = start + seconds
        sleep_until(end + 2.0)
    finally:
        scheduler.shutdown(wait=True)
    window = [r for r in results if start <= r[1] < end]
    delays = [(s - due) * 1000 for _, due, s in window if s is not None]
    keys = Counter((job, due) for job, due, _ in window)
    return {
        "delay_ms": percentiles(delays),
        "errors": sum(1 for r in window if r[2] is None),
        "expected": n_jobs * seconds,
        "fired": len(keys),
        "doubled": sum(1 for n in keys.values() if n > 1),
        "lost": n_jobs * seconds - len(keys),
    }


@benchmark(
    "fire-delay",
    help="scheduled instant -> command start: zksched members vs. APScheduler 3, same run",
    arguments=_fire_delay_arguments,
)
def bench_fire_delay(ctx: BenchContext) -> Result:
    n_members = ctx.args.members or 3
    n_jobs = ctx.args.jobs or (20 if ctx.quick else 500)
    seconds = ctx.args.seconds or (2 if ctx.quick else 30)
    runs = []
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        with own_zookeeper(workdir) as zk:
            for run in range(ctx.args.runs):
                progress(f"fire-delay run {run + 1}: zksched, {n_members} x {n_jobs} jobs")
                ours = measure_zksched_delay(zk, workdir, n_members, n_jobs, seconds)
                progress(f"fire-delay run {run + 1}: APScheduler 3, {n_jobs} jobs")
                theirs = measure_apscheduler_delay(n_jobs, seconds)
                ratio = ours["delay_ms"]["p99"] / max(theirs["delay_ms"]["p99"], 0.001)
                runs.append({"zksched": ours, "apscheduler": theirs, "p99_ratio": round(ratio, 2)})
    rows = []
    for i, run_ in enumerate(runs, 1):
        rows.append(ms_row(f"run {i} zksched ({n_members} members)", run_["zksched"]["delay_ms"]))
        rows.append(ms_row(f"run {i} APScheduler 3", run_["apscheduler"]["delay_ms"]))
    print(markdown_table(["scheduler", "fires", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows))
    for i, run_ in enumerate(runs, 1):
        z, a = run_["zksched"], run_["apscheduler"]
        print(
            f"\nrun {i}: p99 ratio zksched/APScheduler = {run_['p99_ratio']:.2f}; zksched "
            f"lost {z['lost']} doubled {z['doubled']} of {z['expected']}; APScheduler lost "
            f"{a['lost']} doubled {a['doubled']}; zksched due->claimed p99 "
            f"{z['due_to_claimed_ms']['p99']:.1f} ms, claimed->started p50 / p99 "
            f"{z['claimed_to_started_ms']['p50']:.1f} / {z['claimed_to_started_ms']['p99']:.1f} ms"
        )
    ratios = [r["p99_ratio"] for r in runs]
    return {
        "members": n_members,
        "jobs": n_jobs,
        "seconds": seconds,
        "runs": runs,
        "median_p99_ratio": statistics.median(ratios),
    }


# --- failover -----------------------------------------------------------------------------


PROBE = "probe"


def _failover_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=at_least(1), metavar="N", help="per signal (20)")
    parser.add_argument("--load", type=at_least(0), metavar="N", help="other jobs (50)")


def probe_lines(path: Path) -> list[tuple[str, str, float]]:
    """(fire key, member id, start epoch) per probe run, as its command wrote them."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], parts[1], float(parts[2])))
    return out


@benchmark(
    "failover",
    help="SIGKILL / SIGTERM of a probe job's owner: time to its next fire, lost instants",
    arguments=_failover_arguments,
)
def bench_failover(ctx: BenchContext) -> Result:
    trials = ctx.args.trials or (1 if ctx.quick else 20)
    load = ctx.args.load if ctx.args.load is not None else (5 if ctx.quick else 50)
    client_id = f"fo-{uuid.uuid4().hex[:8]}"
    # raw: signal -> the probe's next start on a survivor (includes waiting for the next
    # whole second); handover: that fire's lateness, counted from its instant or from the
    # signal, whichever is later (what the handover itself cost the instant)
    times: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    handover: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        out = workdir / "probe.log"
        script = f'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID $(date +%s.%N)" >> {out}'
        jobs: dict[str, dict[str, Any]] = {
            PROBE: {
                "schedule": "* * * * * *",
                "command": ["sh", "-c", script],
                "catchup": "all",
                "catchup_window": "5m",
                "history": 1000,  # every record kept: what became of a lost instant
            }
        }
        jobs.update(every_second_jobs(load, "load"))
        with own_zookeeper(workdir) as zk, members(zk, client_id, workdir, 3) as group:
            apply_jobs(zk, client_id, workdir, jobs)
            wait_for(lambda: len(probe_lines(out)) >= 3, 30, "the probe to fire")
            for sig in (signal.SIGKILL, signal.SIGTERM) * trials:
                name = signal.Signals(sig).name
                owner_id = probe_lines(out)[-1][1]
                victim = next(m for m in group if m.member_id == owner_id)
                sent = victim.send(sig)

                def on_survivor(sent: float = sent, owner: str = owner_id) -> list[Any]:
                    return [x for x in probe_lines(out) if x[2] > sent and x[1] != owner]

                after = wait_for(on_survivor, 60, "the probe on a survivor")
                first_key, _, first_start = min(after, key=lambda x: x[2])
                due = datetime.fromisoformat(first_key.split("@", 1)[1]).timestamp()
                times[name].append(first_start - sent)
                handover[name].append(first_start - max(sent, due))
                progress(
                    f"failover {name}: next fire {times[name][-1]:.3f} s after the signal, "
                    f"{handover[name][-1]:.3f} s late"
                )
                victim.stop(signal.SIGKILL)
                group[group.index(victim)] = fresh = Member(
                    zk, client_id, workdir / f"member-{uuid.uuid4().hex[:6]}.log"
                ).start()
                wait_for(lambda: all(m.members_seen() == 3 for m in group), 60, "the rejoin")

                def loaded(fresh: Member = fresh) -> bool:
                    return bool(fresh.events("owned") or fresh.events("jobs"))

                wait_for(loaded, 30, "the new member to load the jobs")
                time.sleep(1.5)  # let the probe settle on its (possibly new) owner
            time.sleep(1.5)
            lines = probe_lines(out)
            records = probe_records(zk, client_id)
    keys = Counter(key for key, _, _ in lines)
    instants = sorted(int(datetime.fromisoformat(k.split("@", 1)[1]).timestamp()) for k in keys)
    expected = set(range(instants[0], instants[-1] + 1))
    lost = sorted(expected - set(instants))
    result: Result = {
        "trials": trials,
        "session_timeout_s": SESSION_TIMEOUT,
        "load_jobs": load,
        "seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
        "summary": {k: percentiles(v) for k, v in times.items()},
        "handover_seconds": {k: [round(t, 3) for t in v] for k, v in handover.items()},
        "handover_summary": {k: percentiles(v) for k, v in handover.items()},
        "probe_instants": len(expected),
        "lost": len(lost),
        "lost_instants": [datetime.fromtimestamp(t, UTC).isoformat() for t in lost],
        # what the cluster recorded for each: claimed by a member killed before (or while)
        # starting it (the at-most-once window), skipped, or no record at all (a bug)
        "lost_records": {
            format_utc(datetime.fromtimestamp(t, UTC)): records.get(
                format_utc(datetime.fromtimestamp(t, UTC)), "no record"
            )
            for t in lost
        },
        "doubled": sum(1 for n in keys.values() if n > 1),
    }
    rows = [
        [
            k,
            str(len(v)),
            *(f"{result['summary'][k][p]:.3f}" for p in ("p50", "p95", "max")),
            *(f"{result['handover_summary'][k][p]:.3f}" for p in ("p50", "p95", "max")),
        ]
        for k, v in times.items()
    ]
    header = ["signal", "trials", "next fire p50 s", "p95 s", "max s"]
    print(markdown_table([*header, "late by p50 s", "p95 s", "max s"], rows))
    print(
        f"\nprobe: {len(expected)} instants, lost {len(lost)}, doubled {result['doubled']} "
        f"(session timeout {SESSION_TIMEOUT:g} s, {load} other every-second jobs)"
    )
    for instant, what in result["lost_records"].items():
        print(f"  lost {instant}: {what}")
    return result


def probe_records(zk: str, client_id: str) -> dict[str, str]:
    """The probe's fire records, scheduled -> "<state> by <member>[ (<skip reason>)]"."""
    command = ["jobs", "history", PROBE, "--json", "--limit", "1000"]
    done = subprocess.run(
        [sys.executable, "-m", "zksched", "--zk", zk, "--client-id", client_id, *command],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        return {}
    out = {}
    for row in json.loads(done.stdout):
        reason = f" ({row['skip_reason']})" if row.get("skip_reason") else ""
        out[row["scheduled"]] = f"{row.get('state')} by {row.get('member_id')}{reason}"
    return out


# --- zk-requests: counted in the client ------------------------------------------------------


def _zk_requests_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=at_least(1), nargs="+", metavar="N", help="(1 3 5)")
    parser.add_argument("--jobs", type=at_least(1), metavar="N", help="every-second jobs (30)")
    parser.add_argument("--seconds", type=at_least(1), metavar="S", help="window (10)")


class RequestCounter:
    """Counts every request a KazooClient submits, by type (pings never pass `_call`)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.enabled = False
        self._mutex = threading.Lock()

    def attach(self, client: Any) -> None:
        submit = client._call

        def counted(request: Any, async_object: Any) -> Any:
            if self.enabled:
                with self._mutex:
                    self.counts[type(request).__name__] += 1
            return submit(request, async_object)

        client._call = counted


@contextlib.contextmanager
def in_process_members(zk: str, client_id: str, count: int) -> Iterator[list[Any]]:
    from zksched.runtime.daemon import Daemon
    from zksched.zk.connection import ZkSettings

    daemons = [
        Daemon(
            DaemonConfig(
                zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
                client_id=client_id,
                member_id=f"bench-{i}",
            )
        )
        for i in range(count)
    ]
    try:
        yield daemons
    finally:
        for d in daemons:
            with contextlib.suppress(Exception):
                d.stop()


@benchmark(
    "zk-requests",
    help="ZooKeeper requests per fire by type (counted in the client), 1, 3 and 5 members",
    arguments=_zk_requests_arguments,
)
def bench_zk_requests(ctx: BenchContext) -> Result:
    member_counts: list[int] = ctx.args.members or ([1, 3] if ctx.quick else [1, 3, 5])
    n_jobs = ctx.args.jobs or (10 if ctx.quick else 30)
    seconds = ctx.args.seconds or (2 if ctx.quick else 10)
    rows: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        with own_zookeeper(workdir) as zk:
            for count in member_counts:
                client_id = f"zr-{uuid.uuid4().hex[:8]}"
                counter = RequestCounter()
                fired: list[Mapping[str, object]] = []
                with in_process_members(zk, client_id, count) as daemons:
                    for d in daemons:
                        counter.attach(d.client)
                        d.engine.observers.append(fired.append)
                        d.start()

                    def joined(daemons: list[Any] = daemons, count: int = count) -> bool:
                        return all(
                            d.view.connected and len(d.view.table.members) == count for d in daemons
                        )

                    wait_for(joined, 60, "members to join")
                    # what the members send with no job at all (the contact watchdog's and
                    # the clock probe's requests): per member, not per fire
                    time.sleep(1)
                    counter.enabled = True
                    time.sleep(seconds)
                    counter.enabled = False
                    idle = Counter(counter.counts)
                    counter.counts.clear()
                    apply_jobs(zk, client_id, workdir, every_second_jobs(n_jobs, "zr"))
                    time.sleep(
                        2 if ctx.quick else 4
                    )  # takeover, first fires, history reads: not steady
                    before = len(fired)
                    counter.enabled = True
                    time.sleep(seconds)
                    counter.enabled = False
                    fires = len(fired) - before
                total = sum(counter.counts.values())
                # the same window length, so the idle counts are subtracted as they are
                net = {k: max(0, v - idle.get(k, 0)) for k, v in counter.counts.items()}
                per_fire = {k: round(v / max(fires, 1), 3) for k, v in net.items()}
                rows.append(
                    {
                        "members": count,
                        "fires": fires,
                        "requests": total,
                        "idle_requests": sum(idle.values()),
                        "idle_per_member_per_s": round(sum(idle.values()) / count / seconds, 2),
                        "per_fire_gross": round(total / max(fires, 1), 3),
                        "per_fire": round(sum(net.values()) / max(fires, 1), 3),
                        "by_type_per_fire": dict(sorted(per_fire.items())),
                    }
                )
                progress(f"zk-requests: {count} members: {rows[-1]['per_fire']} per fire")
    kinds = sorted({k for r in rows for k in r["by_type_per_fire"]})
    table = [
        [
            str(r["members"]),
            str(r["fires"]),
            f"{r['per_fire']:.2f}",
            f"{r['per_fire_gross']:.2f}",
            f"{r['idle_per_member_per_s']:.2f}",
            *(f"{r['by_type_per_fire'].get(k, 0):.2f}" for k in kinds),
        ]
        for r in rows
    ]
    headers = ["members", "fires", "requests/fire", "with idle traffic", "idle req/s/member"]
    print(markdown_table([*headers, *kinds], table))
    return {"jobs": n_jobs, "seconds": seconds, "rows": rows}


# --- scale --------------------------------------------------------------------------------


def _scale_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=at_least(1), nargs="+", metavar="N", help="(10000 100000)")
    parser.add_argument("--burst", type=at_least(1), metavar="N", help="jobs due at once (2000)")
    parser.add_argument("--idle-seconds", type=at_least(1), metavar="S", help="(20)")
    parser.add_argument(
        "--bursts",
        type=at_least(1),
        metavar="N",
        help="bursts one after the other, each with the spawn floor measured just before (1)",
    )
    parser.add_argument(
        "--concurrency",
        type=at_least(1),
        metavar="N",
        help=f"each member's `run --concurrency` ({DaemonConfig.concurrency})",
    )


def quiet_daily_jobs(count: int, now: datetime) -> dict[str, dict[str, Any]]:
    """Daily one-minute-resolution schedules spread over every minute of the day except the
    two hours around the benchmark, so that the idle measurement is idle."""
    busy = {now.hour, (now.hour + 1) % 24}
    hours = [h for h in range(24) if h not in busy]
    slots = [(m, h) for h in hours for m in range(60)]
    return {
        f"job-{i:06d}": {
            "schedule": f"{slots[i % len(slots)][0]} {slots[i % len(slots)][1]} * * *",
            "command": ["true"],
        }
        for i in range(count)
    }


def owned_total(group: Sequence[Member]) -> int:
    total = 0
    for m in group:
        owned = m.events("owned")
        total += int(owned[-1]["owned"]) if owned else 0
    return total


@benchmark(
    "scale",
    help="10k / 100k jobs: apply time, ready time, RSS, idle CPU, a burst due at one instant",
    arguments=_scale_arguments,
)
def bench_scale(ctx: BenchContext) -> Result:
    sizes: list[int] = ctx.args.jobs or ([1_000] if ctx.quick else [10_000, 100_000])
    burst = ctx.args.burst or (50 if ctx.quick else 2_000)
    idle_seconds = ctx.args.idle_seconds or (1 if ctx.quick else 20)
    bursts = ctx.args.bursts or 1
    rows: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        with own_zookeeper(workdir) as zk:
            for size in sizes:
                rows.append(
                    _scale_one(
                        zk, workdir, size, burst, idle_seconds, ctx.args.concurrency, bursts
                    )
                )
    header = [
        "jobs",
        "apply s",
        "ready s",
        "RSS MB (max)",
        "idle CPU % (max)",
        "burst",
        "burst p50 ms",
        "burst p99 ms",
        "burst max ms",
        "lost",
        "doubled",
    ]
    table = [
        [
            f"{r['jobs']:,}",
            f"{r['apply_s']:.1f}",
            f"{r['ready_s']:.1f}",
            f"{max(r['rss_mb']):.0f}",
            f"{max(r['idle_cpu_percent']):.2f}",
            f"{r['burst']:,}",
            f"{r['burst_delay_ms']['p50']:.0f}",
            f"{r['burst_delay_ms']['p99']:.0f}",
            f"{r['burst_delay_ms']['max']:.0f}",
            str(r["burst_lost"]),
            str(r["burst_doubled"]),
        ]
        for r in rows
    ]
    print(markdown_table(header, table))
    if bursts > 1:
        print()
        print(
            markdown_table(
                ["jobs", "burst", "p50 ms", "p99 ms", "max ms", "floor p99 ms", "p99 / floor"],
                [
                    [
                        f"{r['jobs']:,}",
                        str(i + 1),
                        f"{b['burst_delay_ms']['p50']:.0f}",
                        f"{b['burst_delay_ms']['p99']:.0f}",
                        f"{b['burst_delay_ms']['max']:.0f}",
                        f"{b['floor_ms']['p99']:.0f}",
                        f"{b['p99_to_floor']:.2f}",
                    ]
                    for r in rows
                    for i, b in enumerate(r["bursts"])
                ],
            )
        )
    return {"members": 3, "rows": rows}


def _scale_one(
    zk: str,
    workdir: Path,
    size: int,
    burst: int,
    idle_seconds: int,
    concurrency: int | None,
    bursts: int = 1,
) -> Result:
    client_id = f"sc-{uuid.uuid4().hex[:8]}"
    jobs = quiet_daily_jobs(size, datetime.now(UTC))
    progress(f"scale: applying {size:,} jobs")
    apply_s = apply_jobs(zk, client_id, workdir, jobs)
    progress(f"scale: {size:,} jobs applied in {apply_s:.1f} s; starting 3 members")
    t0 = time.time()
    run_args = () if concurrency is None else ("--concurrency", str(concurrency))
    group = [
        Member(zk, client_id, workdir / f"{client_id}-{i}.log", run_args=run_args).start()
        for i in range(3)
    ]
    try:
        wait_for(
            # every member has taken its share: a first member's "owned all" from before
            # the others joined adds up to the job count too, until it drops their shares
            lambda: all(m.members_seen() == 3 and m.events("owned") for m in group)
            and owned_total(group) == size,
            300,
            "every job to be owned and scheduled",
        )
        ready_s = max(float(m.events("owned")[-1]["ts"]) for m in group) - t0
        progress(f"scale: ready after {ready_s:.1f} s; measuring idle CPU")
        time.sleep(2)
        cpu_before = [m.cpu_seconds() for m in group]
        time.sleep(idle_seconds)
        idle = [
            round((m.cpu_seconds() - b) / idle_seconds * 100, 2)
            for m, b in zip(group, cpu_before, strict=True)
        ]
        rss = [round(m.rss_mb(), 1) for m in group]
        measured = [
            _scale_burst(zk, client_id, workdir, group, jobs, f"burst{n}-", burst, apply_s)
            for n in range(bursts)
        ]
    finally:
        for m in group:
            m.stop()
    first = measured[0]
    p99s = [b["burst_delay_ms"]["p99"] for b in measured]
    result = {
        "jobs": size,
        "apply_s": round(apply_s, 2),
        "ready_s": round(ready_s, 2),
        "rss_mb": rss,
        "idle_cpu_percent": idle,
        "idle_seconds": idle_seconds,
        "burst": burst,
        # the first burst's figures, as before `--bursts`; every burst's in `bursts`
        **{k: v for k, v in first.items() if k.startswith("burst_")},
        "concurrency": concurrency or DaemonConfig.concurrency,
        "bursts": measured,
        "burst_p99_ms_median": round(statistics.median(p99s), 1),
        "p99_to_floor_median": round(statistics.median(b["p99_to_floor"] for b in measured), 3),
    }
    progress(f"scale: {size:,} jobs: {json.dumps(result)}")
    return result


def wait_quiet(group: Sequence[Member], until: float) -> None:
    """Wait (until the epoch `until` at the latest) for the members together to use less
    than a tenth of a core over half a second."""
    while time.time() < until:
        before = sum(m.cpu_seconds() for m in group)
        time.sleep(0.5)
        if sum(m.cpu_seconds() for m in group) - before < 0.05:
            return


def _scale_burst(
    zk: str,
    client_id: str,
    workdir: Path,
    group: Sequence[Member],
    jobs: dict[str, dict[str, Any]],
    prefix: str,
    burst: int,
    apply_s: float,
) -> Result:
    """`burst` more jobs (named `prefix`...), all due at one instant far enough ahead for the
    apply, every member's reload of the changed buckets, and the taking of their locks
    `LEAD` seconds ahead, as for any job that exists longer than that before it fires; the
    spawn floor measured shortly before it (the machine's state of the moment: on a shared
    machine a burst's p99 moves with it, the ratio much less)."""
    due = math.ceil(time.time() + max(LEAD + 10.0, 2.5 * apply_s + 8))
    at = datetime.fromtimestamp(due, UTC)
    spec = f"{at.second} {at.minute} {at.hour} {at.day} {at.month} *"
    jobs.update({f"{prefix}{i:05d}": {"schedule": spec, "command": ["true"]} for i in range(burst)})
    progress(f"scale: burst of {burst:,} jobs due at {at.isoformat()}")
    burst_apply_s = apply_jobs(zk, client_id, workdir, jobs)
    if time.time() > due - 1:
        raise RuntimeError("the burst's apply took longer than its lead time")
    # once the members have read the new jobs and before they take their locks (LEAD
    # ahead of the instant): an idle cluster (at 100,000 jobs a reload takes seconds)
    wait_quiet(group, due - LEAD - 4.0)
    floor = spawn_floor(burst, len(group))
    if time.time() > due - LEAD:
        raise RuntimeError("the spawn floor ran into the taking of the burst's locks")

    def burst_fires(member: Member | None = None) -> list[dict[str, Any]]:
        return [
            e
            for m in (group if member is None else [member])
            for e in m.events("fire")
            if e["job"].startswith(prefix)
        ]

    def cpu() -> list[float]:
        return [m.cpu_seconds(children) for m in group for children in (False, True)]

    sleep_until(due - 0.5)
    cpu_before = cpu()
    # Fires are logged with their results, which wait until the burst has settled: no
    # reading of the members' logs (this process's CPU) during the burst itself.
    sleep_until(due + 2.0)
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: len(burst_fires()) >= burst, due - time.time() + 60, "the burst")
    time.sleep(1)
    fires = burst_fires()
    # each member's share: when its claims came back, how its starts spread
    per_member = []
    for m in group:
        mine = burst_fires(m)
        if mine:
            per_member.append(
                {
                    "fires": len(mine),
                    "claimed_ms_max": round(
                        max(ms_between(mine, "scheduled_ts", "claimed_ts")), 1
                    ),
                    "started_ms": percentiles(ms_between(mine, "scheduled_ts")),
                }
            )
    cpu_used = [after - before for after, before in zip(cpu(), cpu_before, strict=True)]
    keys = Counter(e["fire_key"] for e in fires)
    stats = percentiles(ms_between(fires, "scheduled_ts"))
    return {
        "burst_apply_s": round(burst_apply_s, 2),
        "burst_delay_ms": stats,
        "burst_claimed_ms": percentiles(ms_between(fires, "scheduled_ts", "claimed_ts")),
        # CPU seconds from 0.5 s before the burst until 1 s after its last fire was logged
        "burst_cpu_s": {
            "daemons": round(sum(cpu_used[0::2]), 2),
            "commands": round(sum(cpu_used[1::2]), 2),
        },
        "burst_by_member": per_member,
        "burst_lost": burst - len(keys),
        "burst_doubled": sum(1 for n in keys.values() if n > 1),
        "floor_ms": floor,
        "p99_to_floor": round(stats["p99"] / floor["p99"], 3) if floor["p99"] else math.nan,
    }


# --- profile ------------------------------------------------------------------------------


def _profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=at_least(1), metavar="N", help="every-second jobs (200)")
    parser.add_argument("--seconds", type=at_least(1), metavar="S", help="window (10)")
    parser.add_argument("--top", type=at_least(1), default=25, metavar="N", help="rows (25)")


class ThreadProfiles:
    """One cProfile per fire thread (cProfile only sees the thread that enabled it)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.profiles: list[cProfile.Profile] = []
        self.enabled = False
        self._mutex = threading.Lock()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return fn(*args, **kwargs)
            profile = getattr(self._local, "profile", None)
            if profile is None:
                profile = self._local.profile = cProfile.Profile()
                with self._mutex:
                    self.profiles.append(profile)
            profile.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                profile.disable()

        return profiled


@benchmark(
    "profile",
    help="where the time on the fire path goes: phases, and cProfile of the fire threads",
    arguments=_profile_arguments,
)
def bench_profile(ctx: BenchContext) -> Result:
    n_jobs = ctx.args.jobs or (20 if ctx.quick else 200)
    seconds = ctx.args.seconds or (1 if ctx.quick else 10)
    profiles = ThreadProfiles()
    events: list[Mapping[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        client_id = f"pr-{uuid.uuid4().hex[:8]}"
        with own_zookeeper(workdir) as zk, in_process_members(zk, client_id, 1) as daemons:
            daemon = daemons[0]
            # every fire goes through the engine's dispatch of the core's actions
            engine = daemon.engine
            engine._dispatch = profiles.wrap(engine._dispatch)
            engine.observers.append(events.append)
            daemon.start()
            wait_for(lambda: daemon.view.connected, 60, "the member to join")
            apply_jobs(zk, client_id, workdir, every_second_jobs(n_jobs, "pr"))
            time.sleep(3)
            before = len(events)
            profiles.enabled = True
            time.sleep(seconds)
            profiles.enabled = False
            time.sleep(1)
            window = list(events[before:])
    phases = {
        "due -> claimed (lock + claim)": ms_between(window, "scheduled_ts", "claimed_ts"),
        "claimed -> started (spawn)": ms_between(window, "claimed_ts"),
        "started -> finished (command)": ms_between(window, "started_ts", "finished_ts"),
    }
    summary = {k: percentiles(v) for k, v in phases.items()}
    print(
        markdown_table(
            ["phase", "fires", "p50 ms", "p95 ms", "p99 ms", "max ms"],
            [ms_row(k, v) for k, v in summary.items()],
        )
    )
    text = io.StringIO()
    if profiles.profiles:
        stats = pstats.Stats(profiles.profiles[0], stream=text)
        for extra in profiles.profiles[1:]:
            stats.add(extra)
        stats.sort_stats("cumulative").print_stats(ctx.args.top)
    print("\ncProfile of the fire threads (cumulative; includes waiting on ZooKeeper replies):")
    print(text.getvalue())
    return {"jobs": n_jobs, "seconds": seconds, "phases_ms": summary, "cprofile": text.getvalue()}


# --- spawn-floor: the machine's own limit for a burst -------------------------------------


SPAWNER = """
import os, subprocess, sys, time
count, at = int(sys.argv[1]), float(sys.argv[2])
time.sleep(max(0.0, at - time.time()))
starts, pids = [], []
for _ in range(count):
    p = subprocess.Popen(["true"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, process_group=0, close_fds=True)
    starts.append(time.time() - at)
    p.stdout.close(); p.stderr.close(); pids.append(p)
for p in pids:
    p.wait()
print(" ".join(f"{s:.6f}" for s in starts))
"""


def spawn_floor(burst: int, processes: int) -> dict[str, float]:
    """Start delays (ms) of `burst` `true`s started by `processes` plain Python loops at one
    instant, a second from now (see `bench_spawn_floor`)."""
    at = time.time() + 1.0
    shares = [burst // processes + (1 if i < burst % processes else 0) for i in range(processes)]
    spawners = [
        subprocess.Popen(
            [sys.executable, "-c", SPAWNER, str(n), str(at)], stdout=subprocess.PIPE, text=True
        )
        for n in shares
    ]
    delays: list[float] = []
    for spawner in spawners:
        out, _ = spawner.communicate(timeout=120)
        delays += [float(v) * 1000 for v in out.split()]
    return percentiles(delays)


def _spawn_floor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--burst", type=at_least(1), metavar="N", help="processes (2000)")
    parser.add_argument("--processes", type=at_least(1), metavar="N", help="spawners (3)")


@benchmark(
    "spawn-floor",
    help="the machine's limit for a burst: N `true` commands started by plain Python loops",
    arguments=_spawn_floor_arguments,
)
def bench_spawn_floor(ctx: BenchContext) -> Result:
    """No scheduler at all: `--processes` Python processes (as many as the scale benchmark's
    members) start their share of `--burst` commands the way zksched does (own process group,
    pipes), all at the same instant. What a burst's start delays cannot beat here."""
    burst = ctx.args.burst or (200 if ctx.quick else 2000)
    processes = ctx.args.processes or 3
    stats = spawn_floor(burst, processes)
    print(
        markdown_table(
            ["burst", "spawners", "p50 ms", "p95 ms", "p99 ms", "max ms"],
            [[f"{burst:,}", str(processes), *ms_row("", stats)[2:]]],
        )
    )
    return {"burst": burst, "processes": processes, "start_delay_ms": stats}
