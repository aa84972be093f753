"""`scripts/bench [--quick] [--out DIR] BENCHMARK [...]`: run one benchmark and write its
result, with the machine it ran on, to `<out>/<name>-<UTC timestamp>.json`."""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

# Each import registers its benchmarks, in the order `scripts/bench --help` lists them.
# isort: off
from tools.bench import owners, http_latency, fire_delay, failover  # noqa: F401
from tools.bench import zk_requests, scale, fire_profile, spawn_floor  # noqa: F401
from tools.bench import functions  # noqa: F401
from tools.bench import blip, members, job_memory, join_cost  # noqa: F401

# isort: on
from tools.bench.machine import machine
from tools.bench.registry import BENCHMARKS, BenchContext
from tools.bench.report import progress


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    # The global flags are also accepted after the subcommand (`bench owners --quick`). Only
    # the top-level parser has real defaults: a subparser's default would overwrite a value
    # given before the subcommand, so there they are SUPPRESSed. (Not argparse `parents=`:
    # those share Action objects, and set_defaults on one parser would change the other.)
    parser.add_argument(
        "--quick",
        action="store_true",
        default=False if defaults else argparse.SUPPRESS,
        help="small sizes that finish in a few seconds (CI smoke run)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench-results") if defaults else argparse.SUPPRESS,
        metavar="DIR",
        help="directory for the JSON results (default: bench-results/)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="zksched benchmarks; results are printed and saved as JSON.",
    )
    _add_global_options(parser, defaults=True)
    subparsers = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for bench in BENCHMARKS.values():
        sub = subparsers.add_parser(bench.name, help=bench.help, description=bench.help)
        _add_global_options(sub, defaults=False)
        bench.add_arguments(sub)
    return parser


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    # once: a second SIGTERM (a loop killed with pkill, say) must not cut the stopping of the
    # clusters short, which would leave members running
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM (a loop of benchmarks killed, say) still stops the clusters a benchmark started:
    # their members run in sessions of their own and would outlive it, loading the machine
    signal.signal(signal.SIGTERM, _interrupted)
    bench = BENCHMARKS[args.benchmark]
    ctx = BenchContext(quick=args.quick, out_dir=args.out, args=args)
    started = dt.datetime.now(dt.UTC)
    try:
        results = bench.run(ctx)
    except KeyboardInterrupt as exc:  # its clusters were stopped on the way out
        progress(f"interrupted ({exc}); nothing written")
        return 130
    record = {
        "benchmark": bench.name,
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 3),
        "quick": ctx.quick,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "machine": machine(),
        "results": results,
    }
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{bench.name}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    path = ctx.out_dir / f"{stem}.json"
    for n in itertools.count(2):  # two runs within one second must not overwrite each other
        if not path.exists():
            break
        path = ctx.out_dir / f"{stem}-{n}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    progress(f"results written to {path}")
    return 0
