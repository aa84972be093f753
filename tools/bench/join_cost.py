"""The `join-cost` benchmark: what a member joining a cluster spends on its owner table and
its takeover, in this process (no ZooKeeper), the daemon's own classes.

N daily jobs (`scale`'s) are read as a daemon reads them; three members are in the cluster.
A fourth, this one, waits to join: it weighs every job over the members and itself
(`weigh`), then its node appears and it takes its share (`takeover`: the owner table
derived, the fire core aligned, every owned job made dormant or given its machine).
Then a leave, among the same four: this member takes its part of the leaver's jobs
(`leave takeover`), and last it stops itself (`stop pass`: every owned job given up, what a
SIGTERMed member does before its node goes).
"""

from __future__ import annotations

import argparse
import time
from typing import Any, cast

from tools.bench.job_memory import _StoredTable, answered_engine, stored_table
from tools.bench.registry import BenchContext, Result, benchmark, job_counts
from tools.bench.report import markdown_table, progress
from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.runtime.membership import ClusterView, JobsSnapshot
from zksched.runtime.membership.job_watch import JobTableWatcher
from zksched.zk.paths import ClusterPaths

ME = "joiner"
SESSION = 7


def measure(count: int) -> Result:
    paths = ClusterPaths("join")
    root, blobs = stored_table(count)
    got: list[JobsSnapshot] = []
    watcher = JobTableWatcher(
        cast(Any, _StoredTable(root, blobs, paths)), paths, 5.0, got.append, lambda _t: None
    )
    watcher._refresh_jobs()
    engine = answered_engine(ME)
    ready: list[float] = []
    engine.on_ready_to_join = lambda: ready.append(time.perf_counter())
    inbox = cast(Any, engine)._queue

    def turns() -> None:
        while engine.turn(0.0) and not inbox.empty():
            pass

    others = [Member(f"member-{i}", znode=f"/m/member-{i}.{i:010d}") for i in range(3)]
    engine.update_jobs(got[-1])
    turns()
    started = time.perf_counter()
    engine.update_view(ClusterView(True, SESSION, ME, None, OwnerTable(others), Member(ME)))
    turns()
    weighed = time.perf_counter()
    joined = [*others, Member(ME, znode="/m/joiner.0000000009")]
    engine.update_view(ClusterView(True, SESSION, ME, joined[-1].znode, OwnerTable(joined)))
    turns()
    taken = time.perf_counter()
    owned, machines = len(engine.core.owned()), len(engine.core.jobs)
    stayed = [m for m in joined if m.member_id != "member-2"]
    engine.update_view(ClusterView(True, SESSION, ME, joined[-1].znode, OwnerTable(stayed)))
    turns()
    left = time.perf_counter()
    owned_after_leave = len(engine.core.owned())
    engine.stop_dispatching()
    turns()
    stopped = time.perf_counter()
    return {
        "jobs": count,
        "members": len(joined),
        "ready": bool(ready),
        "weigh_s": weighed - started,
        "takeover_s": taken - weighed,
        "owned": owned,
        "machines": machines,
        "leave_takeover_s": left - taken,
        "owned_after_leave": owned_after_leave,
        "stop_s": stopped - left,
    }


def _join_cost_arguments(parser: argparse.ArgumentParser) -> None:
    job_counts(parser, "100000 200000")


@benchmark(
    "join-cost",
    help="a member joining 3 others, then one leaving, then its stop: in process",
    arguments=_join_cost_arguments,
)
def bench_join_cost(ctx: BenchContext) -> Result:
    sizes = ctx.args.jobs or ([5_000] if ctx.quick else [100_000, 200_000])
    rows = []
    for size in sizes:
        progress(f"join-cost: {size:,} jobs")
        rows.append(measure(size))
    print(
        markdown_table(
            [
                "jobs",
                "members",
                "owned",
                "machines",
                "weigh s",
                "takeover s",
                "owned after a leave",
                "leave takeover s",
                "stop pass s",
            ],
            [
                [
                    f"{r['jobs']:,}",
                    str(r["members"]),
                    f"{r['owned']:,}",
                    f"{r['machines']:,}",
                    f"{r['weigh_s']:.2f}",
                    f"{r['takeover_s']:.2f}",
                    f"{r['owned_after_leave']:,}",
                    f"{r['leave_takeover_s']:.2f}",
                    f"{r['stop_s']:.2f}",
                ]
                for r in rows
            ],
        )
    )
    return {"runs": rows}
