"""The `scale` benchmark: 10k / 100k jobs on 3 members: apply and ready times, RSS, idle CPU,
bursts of jobs due at one instant, and a change of membership (scale_change.py)."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tools.bench.burst import measure_burst
from tools.bench.daemons import (
    SESSION_TIMEOUT,
    BenchMember,
    apply_jobs,
    own_zookeeper,
    wait_for,
)
from tools.bench.registry import BenchContext, Result, at_least, benchmark, job_counts
from tools.bench.report import markdown_table, progress
from tools.bench.scale_change import change_membership, probe_jobs
from zksched.runtime.daemon import DaemonConfig


def _scale_arguments(parser: argparse.ArgumentParser) -> None:
    job_counts(parser, "10000 100000")
    parser.add_argument("--burst", type=at_least(1), metavar="N", help="jobs due at once (2000)")
    parser.add_argument("--idle-seconds", type=at_least(1), metavar="S", help="(20)")
    parser.add_argument(
        "--bursts",
        type=at_least(1),
        metavar="N",
        help="bursts one after the other, each with the spawn floor measured just before (1)",
    )
    parser.add_argument(
        "--probes",
        type=at_least(0),
        metavar="N",
        help="every-second probe jobs across the change of membership (20; 0: no change)",
    )
    parser.add_argument(
        "--concurrency",
        type=at_least(1),
        metavar="N",
        help=f"each member's `run --concurrency` ({DaemonConfig.concurrency})",
    )
    parser.add_argument(
        "--change-only",
        action="store_true",
        help="apply, ready, then the change of membership alone: no idle measurement, no "
        "burst, no probes (no apply between ready and the change)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=SESSION_TIMEOUT,
        metavar="S",
        help=f"each member's session timeout ({SESSION_TIMEOUT:g}; a full garbage collection "
        "at a million jobs holds a member for seconds: the daemon's default, 10, outlasts it)",
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


def owned_total(group: Sequence[BenchMember]) -> int:
    total = 0
    for m in group:
        owned = m.events("owned")
        total += int(owned[-1]["owned"]) if owned else 0
    return total


@benchmark(
    "scale",
    help="10k / 100k jobs: apply, ready, RSS, idle CPU, a burst, a change of membership",
    arguments=_scale_arguments,
)
def bench_scale(ctx: BenchContext) -> Result:
    sizes: list[int] = ctx.args.jobs or ([1_000] if ctx.quick else [10_000, 100_000])
    burst = ctx.args.burst or (50 if ctx.quick else 2_000)
    idle_seconds = ctx.args.idle_seconds or (1 if ctx.quick else 20)
    bursts = ctx.args.bursts or 1
    probes = ctx.args.probes if ctx.args.probes is not None else (5 if ctx.quick else 20)
    rows: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        with own_zookeeper(workdir) as zk:
            if ctx.args.change_only:
                return _change_only(zk, workdir, sizes, ctx.args.session_timeout)
            for size in sizes:
                rows.append(
                    _scale_one(
                        zk,
                        workdir,
                        size,
                        burst,
                        idle_seconds,
                        ctx.args.concurrency,
                        bursts,
                        probes,
                        ctx.args.session_timeout,
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
        "leave seen / settled s",
        "join settled s",
        "change lost",
        "change doubled",
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
            *(
                [
                    f"{r['change']['leave_seen_s']:.2f} / {r['change']['leave_settled_s']:.2f}",
                    f"{r['change']['join_settled_s']:.2f}",
                    str(r["change"]["change_lost"]),
                    str(r["change"]["change_doubled"]),
                ]
                if r.get("change")
                else ["-"] * 4
            ),
        ]
        for r in rows
    ]
    print(markdown_table(header, table))
    if bursts > 1:
        print()
        print(
            markdown_table(
                [
                    "jobs",
                    "burst",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "floor p99 ms",
                    "p99 / floor",
                    "CPU s (daemons, commands, ZooKeeper)",
                    "floor CPU s",
                ],
                [
                    [
                        f"{r['jobs']:,}",
                        str(i + 1),
                        f"{b['burst_delay_ms']['p50']:.0f}",
                        f"{b['burst_delay_ms']['p99']:.0f}",
                        f"{b['burst_delay_ms']['max']:.0f}",
                        f"{b['floor_ms']['p99']:.0f}",
                        f"{b['p99_to_floor']:.2f}",
                        ", ".join(f"{v:.2f}" for v in b["burst_cpu_s"].values()),
                        f"{b['floor_cpu_s']:.2f}",
                    ]
                    for r in rows
                    for i, b in enumerate(r["bursts"])
                ],
            )
        )
    return {"members": 3, "rows": rows}


def _start_three(
    zk: str,
    client_id: str,
    workdir: Path,
    count: int,
    session_timeout: float,
    run_args: tuple[str, ...] = (),
) -> tuple[list[BenchMember], float, Callable[[], BenchMember]]:
    """Three members started together; once every job is owned: them, the seconds from
    their start, and a way to start one more."""
    t0 = time.time()

    def start_member() -> BenchMember:
        log = workdir / f"{client_id}-{uuid.uuid4().hex[:6]}.log"
        member = BenchMember(zk, client_id, log, run_args=run_args, session_timeout=session_timeout)
        return member.start()

    group: list[BenchMember] = []
    try:
        group += [start_member() for _ in range(3)]
        wait_for(
            # every member has taken its share: a first member's "owned all" from before
            # the others joined adds up to the job count too, until it drops their shares
            lambda: (
                all(m.members_seen() == 3 and m.events("owned") for m in group)
                and owned_total(group) == count
            ),
            300,
            "every job to be owned and scheduled",
        )
    except BaseException:
        for m in group:
            m.stop()
        raise
    ready_s = max(float(m.events("owned")[-1]["ts"]) for m in group) - t0
    return group, ready_s, start_member


def _change_only(zk: str, workdir: Path, sizes: list[int], session_timeout: float) -> Result:
    """Per size: apply, ready, then a leave and a join with nothing else going on."""
    rows: list[Result] = []
    for size in sizes:
        client_id = f"sc-{uuid.uuid4().hex[:8]}"
        jobs = quiet_daily_jobs(size, datetime.now(UTC))
        progress(f"scale: applying {size:,} jobs")
        apply_s = apply_jobs(zk, client_id, workdir, jobs)
        group, ready_s, start_member = _start_three(zk, client_id, workdir, size, session_timeout)
        try:
            progress(f"scale: ready after {ready_s:.1f} s; the change of membership")
            rss = [round(m.rss_mb(), 1) for m in group]
            change = change_membership(
                zk,
                client_id,
                workdir,
                group,
                jobs,
                0,
                workdir / f"{client_id}-probes.log",
                start_member,
            )
            change["rss_mb_after"] = [round(m.rss_mb(), 1) for m in group]
        finally:
            for m in group:
                m.stop()
        rows.append(
            {"jobs": size, "apply_s": round(apply_s, 2), "ready_s": round(ready_s, 2)}
            | {"rss_mb": rss, "change": change, "session_timeout": session_timeout}
        )
        progress(f"scale: {size:,} jobs, the change alone: {json.dumps(rows[-1])}")
    print(
        markdown_table(
            [
                "jobs",
                "apply s",
                "ready s",
                "RSS MB",
                "stop s",
                "leave settled s",
                "join settled s",
                "RSS MB after",
            ],
            [
                [
                    f"{r['jobs']:,}",
                    f"{r['apply_s']:.1f}",
                    f"{r['ready_s']:.1f}",
                    ", ".join(f"{x:.0f}" for x in r["rss_mb"]),
                    f"{r['change']['stop_s']:.2f}",
                    f"{r['change']['leave_settled_s']:.2f}",
                    f"{r['change']['join_settled_s']:.2f}",
                    ", ".join(f"{x:.0f}" for x in r["change"]["rss_mb_after"]),
                ]
                for r in rows
            ],
        )
    )
    return {"members": 3, "change_only": True, "rows": rows}


def _scale_one(
    zk: str,
    workdir: Path,
    size: int,
    burst: int,
    idle_seconds: int,
    concurrency: int | None,
    bursts: int = 1,
    probes: int = 0,
    session_timeout: float = SESSION_TIMEOUT,
) -> Result:
    client_id = f"sc-{uuid.uuid4().hex[:8]}"
    jobs = quiet_daily_jobs(size, datetime.now(UTC))
    probe_log = workdir / f"{client_id}-probes.log"
    jobs.update(probe_jobs(probes, probe_log, paused=True))  # resumed for the change
    progress(f"scale: applying {size:,} jobs")
    apply_s = apply_jobs(zk, client_id, workdir, jobs)
    progress(f"scale: {size:,} jobs applied in {apply_s:.1f} s; starting 3 members")
    run_args = () if concurrency is None else ("--concurrency", str(concurrency))
    group, ready_s, start_member = _start_three(
        zk, client_id, workdir, len(jobs), session_timeout, run_args
    )
    try:
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
            measure_burst(zk, client_id, workdir, group, jobs, f"burst{n}-", burst, apply_s)
            for n in range(bursts)
        ]
        change = None
        if probes:
            change = change_membership(
                zk, client_id, workdir, group, jobs, probes, probe_log, start_member
            )
            change["rss_mb_after"] = [round(m.rss_mb(), 1) for m in group]
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
        "session_timeout": session_timeout,
        "bursts": measured,
        "change": change,
        "burst_p99_ms_median": round(statistics.median(p99s), 1),
        "p99_to_floor_median": round(statistics.median(b["p99_to_floor"] for b in measured), 3),
        "cpu_to_floor_median": round(statistics.median(b["cpu_to_floor"] for b in measured), 3),
    }
    progress(f"scale: {size:,} jobs: {json.dumps(result)}")
    return result
