"""`scripts/chaos [SCENARIO...|all] [--duration 10m] [--seed N]`: run scenarios one after the
other, print the table, exit 0 only when every one passed."""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from tools.chaos.report import format_table, write_json
from tools.chaos.runner import run_scenario
from tools.chaos.scenarios import SCENARIOS
from tools.chaos.verdict import ScenarioResult
from zksched.core.durations import parse_duration


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/chaos",
        description="Break a zksched cluster on purpose: "
        + "; ".join(f"{name}: {s.summary}" for name, s in SCENARIOS.items()),
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="names, or all")
    parser.add_argument(
        "--duration", default="30s", help="total fault time, shared by the scenarios (30s, 10m)"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--session-timeout", type=float, default=3.0, metavar="S")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write results as JSON")
    parser.add_argument("--workdir", help="keep every log here (default: a temporary folder)")
    args = parser.parse_args(argv)
    names = args.scenarios or ["all"]
    if "all" in names:
        names = list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    try:
        args.duration_s = parse_duration(args.duration)
    except ValueError as exc:
        parser.error(f"--duration: {exc}")
    if args.members < 2:
        parser.error("--members must be at least 2 (a fault needs a survivor)")
    args.names = names
    return args


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    # the suite's own client reconnects through every outage it causes: no noise about it
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    # SIGTERM or SIGINT (ignored by default in a background job) still tear clusters down
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    share = args.duration_s / len(args.names)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="zksched-chaos-"))
    print(
        f"chaos: seed {seed}, {share:g}s per scenario, {args.members} members, "
        f"session timeout {args.session_timeout:g}s, logs in {base}",
        file=sys.stderr,
    )
    results = []
    for name in args.names:
        print(f"chaos: {name} ...", file=sys.stderr, flush=True)
        began = time.monotonic()
        try:
            result = run_scenario(
                SCENARIOS[name],
                duration=share,
                seed=seed,
                members=args.members,
                session_timeout=args.session_timeout,
                workdir=base / name,
            )
        except Exception as exc:  # a cluster that would not start: say so, go on
            result = ScenarioResult(name, seed, share, args.members, args.session_timeout)
            result.failures.append(f"{type(exc).__name__}: {exc}")
        results.append(result)
        print(
            f"chaos: {name} {'PASS' if result.passed else 'FAIL'} "
            f"in {time.monotonic() - began:.0f}s",
            file=sys.stderr,
            flush=True,
        )
        for line in result.missing:
            print(f"  {line}", file=sys.stderr)
    print(format_table(results))
    if args.json_out:
        write_json(Path(args.json_out), seed, results)
    if not args.workdir and all(r.passed for r in results):
        shutil.rmtree(base, ignore_errors=True)
    return 0 if all(r.passed for r in results) else 1
