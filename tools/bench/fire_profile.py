"""The `profile` benchmark: where the time on the fire path goes: the phases of every fire,
and cProfile of the fire threads of a member running in this process."""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tools.bench.daemons import (
    apply_jobs,
    every_second_jobs,
    in_process_members,
    ms_between,
    own_zookeeper,
    wait_for,
)
from tools.bench.registry import BenchContext, Result, at_least, benchmark
from tools.bench.report import markdown_table, ms_row, percentiles


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
        "due -> started (all)": ms_between(window, "scheduled_ts"),
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
