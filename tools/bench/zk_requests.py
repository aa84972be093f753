"""The `zk-requests` benchmark: ZooKeeper requests per fire, by type, counted in the client
of members running in this process."""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tools.bench.daemons import (
    apply_jobs,
    every_second_jobs,
    in_process_members,
    own_zookeeper,
    wait_for,
)
from tools.bench.registry import BenchContext, Result, at_least, benchmark
from tools.bench.report import markdown_table, progress


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
