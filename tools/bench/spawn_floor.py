"""The `spawn-floor` benchmark: the machine's own limit for a burst, with no scheduler at all."""

from __future__ import annotations

import argparse

from tools.bench.burst import spawn_floor
from tools.bench.registry import BenchContext, Result, at_least, benchmark
from tools.bench.report import markdown_table, ms_row


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
    stats, cpu_s = spawn_floor(burst, processes)
    print(
        markdown_table(
            ["burst", "spawners", "p50 ms", "p95 ms", "p99 ms", "max ms", "CPU s"],
            [[f"{burst:,}", str(processes), *ms_row("", stats)[2:], f"{cpu_s:.2f}"]],
        )
    )
    return {"burst": burst, "processes": processes, "start_delay_ms": stats, "cpu_s": cpu_s}
