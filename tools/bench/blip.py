"""The `blip` benchmark: a member cut off from ZooKeeper for less than its session timeout,
again and again: how soon after the path heals it serves again, and whether it kept its
session (docs/reliability.md, "Network blips")."""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tools.bench.daemons import (
    SESSION_TIMEOUT,
    BenchMember,
    apply_jobs,
    every_second_jobs,
    members,
    own_zookeeper,
    wait_for,
)
from tools.bench.registry import BenchContext, Result, at_least, benchmark
from tools.bench.report import markdown_table, percentiles, progress
from tools.faultproxy import BLACKHOLE, PASS, FaultProxy
from zksched.zk.connection import parse_connect_string


def _blip_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cuts", type=at_least(1), metavar="N", help="cuts (20)")
    parser.add_argument("--low", type=float, default=0.3, help="shortest cut, x session (0.3)")
    parser.add_argument("--high", type=float, default=0.7, help="longest cut, x session (0.7)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the cut lengths (1)")


def first_start_after(member: BenchMember, since: float) -> float | None:
    starts = [float(e["started_ts"]) for e in member.events("fire")]
    later = [s for s in starts if s > since]
    return min(later) if later else None


@benchmark(
    "blip",
    help="short cuts of one member's path to ZooKeeper: back to serving after, session kept",
    arguments=_blip_arguments,
)
def bench_blip(ctx: BenchContext) -> Result:
    cuts = ctx.args.cuts or (3 if ctx.quick else 20)
    rng = random.Random(ctx.args.seed)
    client_id = f"bl-{uuid.uuid4().hex[:8]}"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        with own_zookeeper(workdir) as zk, members(zk, client_id, workdir, 2):
            host, port = parse_connect_string(zk).hosts[0]
            proxy = FaultProxy((host, port)).start()
            cut_member = BenchMember(proxy.address, client_id, workdir / "cut.log").start()
            try:
                wait_for(lambda: cut_member.members_seen() == 3, 60, "the cut member to join")
                # every second, and caught up at once: its first start after a cut is the
                # moment it serves again (the instant it missed, or the next one)
                jobs = every_second_jobs(30, "blip")
                for spec in jobs.values():
                    spec["catchup"] = "latest"
                apply_jobs(zk, client_id, workdir, jobs)
                wait_for(lambda: first_start_after(cut_member, time.time() - 1), 60, "a fire")
                for i in range(cuts):
                    length = SESSION_TIMEOUT * rng.uniform(ctx.args.low, ctx.args.high)
                    began = time.time()
                    proxy.set_mode(BLACKHOLE)
                    time.sleep(length)
                    proxy.set_mode(PASS)
                    healed = time.time()

                    def serving(began: float = began) -> float | None:
                        return first_start_after(cut_member, began + 0.01)

                    started = wait_for(serving, 60, "serving again")
                    time.sleep(2.0)  # its session's fate is known by now
                    states = [
                        e.get("state")
                        for e in cut_member.events("session")
                        if float(e["ts"]) > began
                    ]
                    lost = "LOST" in states  # expired on the server: a new session
                    rows.append(
                        {
                            "cut_s": round(length, 3),
                            "back_s": round(started - healed, 3),
                            "session_lost": lost,
                        }
                    )
                    progress(
                        f"blip {i + 1}/{cuts}: cut {length:.2f} s, serving again "
                        f"{started - healed:.2f} s after it healed"
                        + (", session lost" if lost else "")
                    )
                    time.sleep(rng.uniform(1.0, 2.0))
            finally:
                cut_member.stop()
                proxy.stop()
    back = [r["back_s"] for r in rows]
    result: Result = {
        "session_timeout_s": SESSION_TIMEOUT,
        "cuts": rows,
        "back_after_heal_s": percentiles(back),
        "median_back_s": round(statistics.median(back), 3),
        "beyond_2s": sum(1 for b in back if b > 2.0),
        "sessions_lost": sum(1 for r in rows if r["session_lost"]),
    }
    print(
        markdown_table(
            ["cuts", "cut length", "back after heal: p50", "p95", "max", "> 2 s", "sessions lost"],
            [
                [
                    str(len(rows)),
                    f"{ctx.args.low:g}-{ctx.args.high:g} x {SESSION_TIMEOUT:g} s",
                    f"{result['median_back_s']:.2f} s",
                    f"{result['back_after_heal_s']['p95']:.2f} s",
                    f"{result['back_after_heal_s']['max']:.2f} s",
                    str(result["beyond_2s"]),
                    str(result["sessions_lost"]),
                ]
            ],
        )
    )
    return result
