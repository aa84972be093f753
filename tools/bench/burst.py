"""One burst of jobs due at one instant on running members, measured against the spawn floor:
how fast this machine starts as many commands from plain Python loops (used by `scale`
before each burst, and by `spawn-floor` alone)."""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tools.bench.daemons import (
    BenchMember,
    apply_jobs,
    ms_between,
    sleep_until,
    wait_for,
    zookeeper_cpu_seconds,
)
from tools.bench.registry import Result
from tools.bench.report import percentiles, progress
from zksched.core.fire.model import FireTunables

LEAD = FireTunables().lease_lead  # members take a job's lease this long before its fire


def wait_quiet(group: Sequence[BenchMember], until: float) -> None:
    """Wait (until the epoch `until` at the latest) for the members together to use less
    than a tenth of a core over half a second."""
    while time.time() < until:
        before = sum(m.cpu_seconds() for m in group)
        time.sleep(0.5)
        if sum(m.cpu_seconds() for m in group) - before < 0.05:
            return


def measure_burst(
    zk: str,
    client_id: str,
    workdir: Path,
    group: Sequence[BenchMember],
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
    floor, floor_cpu_s = spawn_floor(burst, len(group))
    if time.time() > due - LEAD:
        raise RuntimeError("the spawn floor ran into the taking of the burst's locks")

    def burst_fires(member: BenchMember | None = None) -> list[dict[str, Any]]:
        return [
            e
            for m in (group if member is None else [member])
            for e in m.events("fire")
            if e["job"].startswith(prefix)
        ]

    def cpu() -> list[float]:
        return [m.cpu_seconds(children) for m in group for children in (False, True)] + [
            zookeeper_cpu_seconds(zk)
        ]

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
                    "claimed_ms_max": round(max(ms_between(mine, "scheduled_ts", "claimed_ts")), 1),
                    "started_ms": percentiles(ms_between(mine, "scheduled_ts")),
                }
            )
    cpu_used = [after - before for after, before in zip(cpu(), cpu_before, strict=True)]
    daemons, commands, server = sum(cpu_used[0:-1:2]), sum(cpu_used[1:-1:2]), cpu_used[-1]
    keys = Counter(e["fire_key"] for e in fires)
    stats = percentiles(ms_between(fires, "scheduled_ts"))
    return {
        "burst_apply_s": round(burst_apply_s, 2),
        "burst_delay_ms": stats,
        "burst_claimed_ms": percentiles(ms_between(fires, "scheduled_ts", "claimed_ts")),
        # CPU seconds from 0.5 s before the burst until 1 s after its last fire was logged
        # (the results' records and the locks' release included), against the floor's: on a
        # machine whose cores the floor already fills, the p99s are about in this ratio
        "burst_cpu_s": {
            "daemons": round(daemons, 2),
            "commands": round(commands, 2),
            "zookeeper": round(server, 2),
        },
        "floor_cpu_s": round(floor_cpu_s, 2),
        "cpu_to_floor": round((daemons + commands + server) / floor_cpu_s, 3)
        if floor_cpu_s
        else math.nan,
        "burst_by_member": per_member,
        "burst_lost": burst - len(keys),
        "burst_doubled": sum(1 for n in keys.values() if n > 1),
        "floor_ms": floor,
        "p99_to_floor": round(stats["p99"] / floor["p99"], 3) if floor["p99"] else math.nan,
    }


SPAWNER = """
import os, resource, subprocess, sys, time
def cpu():
    return sum(getattr(resource.getrusage(who), field)
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))
count, at = int(sys.argv[1]), float(sys.argv[2])
time.sleep(max(0.0, at - time.time()))
cpu_before = cpu()  # from the instant: the interpreter's start is not the floor's
starts, pids = [], []
for _ in range(count):
    p = subprocess.Popen(["true"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, process_group=0, close_fds=True)
    starts.append(time.time() - at)
    p.stdout.close(); p.stderr.close(); pids.append(p)
for p in pids:
    p.wait()
print(" ".join(f"{s:.6f}" for s in starts))
print(f"{cpu() - cpu_before:.6f}")
"""


def spawn_floor(burst: int, processes: int) -> tuple[dict[str, float], float]:
    """Start delays (ms) of `burst` `true`s started by `processes` plain Python loops at one
    instant, a second from now (the `spawn-floor` benchmark, spawn_floor.py), and the CPU
    seconds it used from that instant: the spawners' and their commands'."""
    at = time.time() + 1.0
    shares = [burst // processes + (1 if i < burst % processes else 0) for i in range(processes)]
    spawners = [
        subprocess.Popen(
            [sys.executable, "-c", SPAWNER, str(n), str(at)], stdout=subprocess.PIPE, text=True
        )
        for n in shares
    ]
    delays: list[float] = []
    cpu = 0.0
    for spawner in spawners:
        out, _ = spawner.communicate(timeout=120)
        starts, used = out.splitlines()
        delays += [float(v) * 1000 for v in starts.split()]
        cpu += float(used)
    return percentiles(delays), cpu
