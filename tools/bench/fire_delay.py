"""The `fire-delay` benchmark: scheduled instant -> command start, for zksched members and
for APScheduler 3 in the same run."""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC
from pathlib import Path
from typing import Any

from tools.bench.daemons import (
    BenchMember,
    apply_jobs,
    every_second_jobs,
    members,
    ms_between,
    own_zookeeper,
    sleep_until,
    wait_for,
)
from tools.bench.registry import BenchContext, Result, at_least, benchmark
from tools.bench.report import markdown_table, ms_row, percentiles, progress
from zksched.runtime.fire.tuning import MAX_HOLD


def _fire_delay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=at_least(1), metavar="N", help="members (3)")
    parser.add_argument("--jobs", type=at_least(1), metavar="N", help="every-second jobs (500)")
    parser.add_argument("--seconds", type=at_least(1), metavar="S", help="measured window (30)")
    parser.add_argument("--runs", type=at_least(1), default=1, metavar="N", help="runs (1)")


def fires_in(members_: Sequence[BenchMember], start: float, end: float) -> list[dict[str, Any]]:
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


def measure_apscheduler_delay(n_jobs: int, seconds: int, spawn: bool = True) -> Result:
    """The same jobs in one APScheduler 3 BackgroundScheduler (no coordination at all): the
    job function starts the same command the way zksched does (own process group, no shell) and
    returns the moment it started (`spawn=False`: returns at once, as a function job would);
    scheduled_run_time comes from the event."""
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent  # type: ignore[import-untyped]
    from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-untyped]
    from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]
    from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

    def run_command() -> float:
        if not spawn:
            return time.time()
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
