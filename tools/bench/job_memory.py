"""The `job-memory` benchmark: what a daemon holds per job, structure by structure.

In this process, no ZooKeeper: N jobs shaped like `scale`'s (`quiet_daily_jobs`) are stored
as `jobs apply` stores them (buckets of JSON), then the daemon's own code takes them in, one
stage at a time, each measured with tracemalloc (bytes still allocated after the stage, and
the peak while it ran):

    watcher   JobTableWatcher reads and parses every bucket: its parsed buckets, the
              snapshot it hands on, the JobEntry / JobSpec objects and their strings
    engine    FireEngine.update_jobs: the engine's table and the fire core's
    owners    the owner table's memo, every job weighed (as before joining)
    machines  FireEngine.update_view as one of 3 members: the fire core's job machines (one
              per owned job) and their timers, after each answered its history read

A second, fresh process takes the same stages without tracemalloc and reports its RSS after
each (what a host gives the daemon: the allocator's own overhead and fragmentation too).
`python -m tools.bench.job_memory N` runs one measurement and prints its JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import queue
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from tools.bench.registry import BenchContext, Result, at_least, benchmark, job_counts
from tools.bench.report import markdown_table, progress
from tools.bench.scale import quiet_daily_jobs
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.core.jobtable import StoredJob
from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.runtime.clock import Clock
from zksched.runtime.fire.engine import FireEngine
from zksched.runtime.fire.run_actions import FireSettings
from zksched.runtime.host import ThreadHost
from zksched.runtime.membership import ClusterView, JobsSnapshot
from zksched.runtime.membership.job_watch import JobTableWatcher
from zksched.runtime.run import CommandRunner
from zksched.runtime.skips import SkipLog
from zksched.zk.jobstore import (
    blob_id,
    choose_bucket_count,
    encode_bucket,
    now_utc,
    split_buckets,
)
from zksched.zk.paths import ClusterPaths

STAGES = ("watcher", "engine", "owners", "machines")
MEMBERS = 3
ME = "member-1"


def _job_memory_arguments(parser: argparse.ArgumentParser) -> None:
    job_counts(parser, "100000 200000")


class _Done:
    """A kazoo async result that is already there."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def get(self, timeout: float | None = None) -> Any:
        del timeout
        return self._value


class _Nothing:
    """Stands for the fire stores, never called here: every attribute is one of these."""

    def __getattr__(self, name: str) -> _Nothing:
        return self

    def __call__(self, *args: object, **kwargs: object) -> None:
        return None


class _StoredTable:
    """Stands for ZooKeeper under the watcher's JobStore: the root and the buckets' bytes."""

    def __init__(self, root: bytes, blobs: dict[str, bytes], paths: ClusterPaths) -> None:
        self._nodes = {paths.jobs: root, **{paths.blob(b): c for b, c in blobs.items()}}
        self.connected = True

    def get_async(self, path: str, watch: Any = None) -> _Done:
        del watch
        stat = SimpleNamespace(version=1, mzxid=1)
        return _Done((self._nodes[path], stat))

    def ensure_path_async(self, path: str) -> _Done:
        return _Done(path)


class _AnsweringIO:
    """Stands for the engine's ZooKeeper actions: every read is answered at once, empty (a
    job with no fire history), so that each owned job's machine plans and goes active."""

    def __init__(self, engine: FireEngine) -> None:
        self._engine = engine
        self.leases = SimpleNamespace(give_back=lambda job, take: None)

    def _answer(self, job: str, event: m.JobEvent) -> None:
        self._engine._post_event(job, event)

    def read_history(self, job: str, orphans_since: object) -> None:
        self._answer(job, m.HistoryRead())

    def find_orphans(self, job: str, since: object) -> None:
        self._answer(job, m.OrphansFound())

    def read_ranges(self, job: str, instants: object) -> None:
        self._answer(job, m.RangesRead())

    def take_leases(self, takes: object, session: int) -> None:
        raise AssertionError("no job of this table is due while it is measured")

    claim = take_leases

    def has_chores(self) -> bool:
        return False

    def idle(self) -> bool:
        return True


def stored_table(count: int) -> tuple[bytes, dict[str, bytes]]:
    """The table `jobs apply` would store for `count` jobs: its root and buckets."""
    stamp = now_utc()
    stored = {
        name: StoredJob(
            name, JobSpec(name, job["schedule"], tuple(job["command"])).to_record(), stamp
        )
        for name, job in quiet_daily_jobs(count, datetime.now(UTC)).items()
    }
    buckets: list[str] = []
    blobs: dict[str, bytes] = {}
    for bucket in split_buckets(stored, choose_bucket_count(stored, 0)):
        content = encode_bucket(bucket) if bucket else b""
        buckets.append(blob_id(content) if content else "")
        if content:
            blobs[buckets[-1]] = content
    root = json.dumps({"format": 1, "generation": 1, "buckets": buckets}).encode()
    return root, blobs


def _members() -> list[Member]:
    return [Member(f"member-{i}", znode=f"/m/member-{i}.{i:010d}") for i in range(MEMBERS)]


def answered_engine(member_id: str) -> FireEngine:
    """The daemon's fire engine with no ZooKeeper: every read it asks for is answered."""
    engine = FireEngine(
        cast(Any, _Nothing()),
        CommandRunner(),
        SkipLog(),
        FireSettings("memory", member_id),
        ThreadHost(Clock()),
    )
    engine.io = cast(Any, _AnsweringIO(engine))
    return engine


def measure(count: int, traced: bool) -> Result:
    """Take `count` jobs through the daemon's stages; per stage the bytes it keeps (traced)
    or the process's RSS after it (not traced)."""
    paths = ClusterPaths("memory")
    root, blobs = stored_table(count)
    got: list[JobsSnapshot] = []
    watcher = JobTableWatcher(
        cast(Any, _StoredTable(root, blobs, paths)), paths, 5.0, got.append, lambda _t: None
    )
    engine = answered_engine(ME)
    members = _members()
    view = ClusterView(True, 7, ME, members[1].znode, OwnerTable(members))

    inbox = cast("queue.SimpleQueue[Any]", engine._queue)  # ThreadHost's

    def turns() -> None:
        while engine.turn(0.0) and not inbox.empty():
            pass

    def apply() -> None:
        engine.update_jobs(got[-1])
        turns()

    def weigh() -> None:
        chain = engine.owners
        chain.table = chain.table.with_members(members)
        for name, spec in engine._table.items():
            chain.table.job_owner(name, spec)

    def own() -> None:
        engine.update_view(view)
        turns()

    stages: list[tuple[str, Callable[[], None]]] = [
        ("watcher", watcher._refresh_jobs),
        ("engine", apply),
        ("owners", weigh),
        ("machines", own),
    ]
    gc.collect()
    out: dict[str, Any] = {"jobs": count, "owned": 0, "stages": {}}
    if traced:
        tracemalloc.start()
    last_rss = _rss() if not traced else 0
    for name, run in stages:
        before = tracemalloc.get_traced_memory()[0] if traced else 0
        if traced:
            tracemalloc.reset_peak()
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        gc.collect()
        if traced:
            now, peak = tracemalloc.get_traced_memory()
            out["stages"][name] = {"bytes": now - before, "peak": peak - before, "s": seconds}
        else:
            rss = _rss()
            out["stages"][name] = {"rss": rss - last_rss, "s": seconds}
            last_rss = rss
    if traced:
        tracemalloc.stop()
    out["owned"] = len(engine.core.owned())
    out["machines"] = len(engine.core.jobs)
    out["parts"] = {
        # dicts own their table: their size is theirs alone
        "watcher bucket dicts": sum(sys.getsizeof(d) for d in watcher._parsed.values()),
        "watcher snapshot dict": sys.getsizeof(watcher.snapshot.entries),
        "engine name -> spec": sys.getsizeof(engine._table),
        "owner memo dict": sys.getsizeof(engine.owners.table._memo),
        "core job machines dict": sys.getsizeof(engine.core.jobs),
    }
    return out


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096


def _in_fresh_process(count: int) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench.job_memory", "--rss", str(count)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return cast(Result, json.loads(done.stdout))


@benchmark(
    "job-memory",
    help="per-job memory of a daemon, structure by structure (tracemalloc; RSS); no ZooKeeper",
    arguments=_job_memory_arguments,
)
def bench_job_memory(ctx: BenchContext) -> Result:
    sizes: list[int] = ctx.args.jobs or ([2_000] if ctx.quick else [100_000, 200_000])
    rows: list[Result] = []
    for size in sizes:
        progress(f"job-memory: {size:,} jobs, traced")
        traced = measure(size, traced=True)
        progress(f"job-memory: {size:,} jobs, RSS in a fresh process")
        traced["rss"] = _in_fresh_process(size)
        rows.append(traced)
    header = ["jobs", "owned", *(f"{s} B/job" for s in STAGES), "total B/job", "RSS B/job"]
    table = []
    for r in rows:
        n = r["jobs"]
        kept = [r["stages"][s]["bytes"] for s in STAGES]
        rss = sum(r["rss"]["stages"][s]["rss"] for s in STAGES)
        table.append(
            [
                f"{n:,}",
                f"{r['owned']:,}",
                *(f"{b / n:.0f}" for b in kept),
                f"{sum(kept) / n:.0f}",
                f"{rss / n:.0f}",
            ]
        )
    print(markdown_table(header, table))
    print()
    print(
        markdown_table(
            ["jobs", "stage", "kept B/job", "peak B/job", "RSS B/job", "s"],
            [
                [
                    f"{r['jobs']:,}",
                    s,
                    f"{r['stages'][s]['bytes'] / r['jobs']:.0f}",
                    f"{r['stages'][s]['peak'] / r['jobs']:.0f}",
                    f"{r['rss']['stages'][s]['rss'] / r['jobs']:.0f}",
                    f"{r['rss']['stages'][s]['s']:.2f}",
                ]
                for r in rows
                for s in STAGES
            ]
            + [
                [f"{r['jobs']:,}", f"({part})", f"{size / r['jobs']:.0f}", "", "", ""]
                for r in rows
                for part, size in r["parts"].items()
            ],
        )
    )
    return {"members": MEMBERS, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one job-memory measurement, as JSON")
    parser.add_argument("jobs", type=at_least(1))
    parser.add_argument("--rss", action="store_true", help="RSS per stage, not tracemalloc")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.jobs, traced=not args.rss)))


if __name__ == "__main__":
    main()
