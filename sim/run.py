"""`scripts/simulate`: run the cluster simulator over many seeds, in parallel.

    scripts/simulate --seeds 200 --minutes 10          the CI soak
    scripts/simulate --seed 1234 --trace job3          one seed, its trace for job3
    scripts/simulate --plant paused-fired --seeds 50   show that a planted bug is caught
    scripts/simulate --plant lost-reply-as-failure --weight lost=20 --seeds 80
                                                       ... in a workload of many lost replies

Exit 0 when every seed holds every guarantee; 1 otherwise (each failing seed is printed
with its violations and the command that replays it).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from sim.plantings import PLANTINGS, planted
from sim.scenario import FAULT_WEIGHTS, SimConfig, simulate
from sim.trace import render


@dataclass(frozen=True)
class SeedOutcome:
    seed: int
    violations: list[str]
    started: int
    abandoned: int
    expected: int
    skipped: dict[str, int]
    wall: float
    reruns: int = 0  # at-least-once: orphaned claims run again


def run_seed(
    seed: int,
    minutes: float,
    plant: str | None = None,
    fault_weights: Mapping[str, float] | None = None,
) -> SeedOutcome:
    """One seed (with a bug planted, and a fault mix of its own: see SimConfig)."""
    config = SimConfig(seed, minutes=minutes, fault_weights=dict(fault_weights or {}))
    if plant is None:
        result = simulate(config)
    else:
        with planted(plant):
            result = simulate(config)
    verdict = result.verdict
    return SeedOutcome(
        seed,
        [str(v) for v in verdict.violations],
        verdict.started,
        verdict.abandoned,
        verdict.expected,
        dict(verdict.skipped),
        result.wall,
        verdict.reruns,
    )


def _run(args: tuple[int, float, str | None, Mapping[str, float] | None]) -> SeedOutcome:
    return run_seed(*args)


def run_many(
    seeds: range,
    minutes: float,
    workers: int,
    plant: str | None = None,
    stop_on_first: bool = False,
    fault_weights: Mapping[str, float] | None = None,
) -> list[SeedOutcome]:
    """The seeds' outcomes, in seed order; `stop_on_first`: up to the first with a violation
    (the seeds still running then are killed, not waited for)."""
    outcomes: list[SeedOutcome] = []
    pool = multiprocessing.Pool(workers)
    try:
        for outcome in pool.imap(_run, [(s, minutes, plant, fault_weights) for s in seeds]):
            outcomes.append(outcome)
            if stop_on_first and outcome.violations:
                break
    finally:
        pool.terminate()
        pool.join()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/simulate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds (default 200)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--minutes", type=float, default=10.0, help="simulated minutes a seed")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--plant", choices=sorted(PLANTINGS), help="plant this bug first")
    parser.add_argument(
        "--weight",
        metavar="FAULT=N",
        action="append",
        default=[],
        type=_weight,
        help=f"a fault's weight in place of its usual one (repeatable; faults: "
        f"{', '.join(FAULT_WEIGHTS)})",
    )
    parser.add_argument(
        "--trace",
        metavar="TEXT",
        help="with --seed: print its trace (lines naming TEXT, and the cluster's own events)",
    )
    args = parser.parse_args(argv)
    weights = dict(args.weight)
    if args.seed is not None and args.trace is not None:
        config = SimConfig(args.seed, minutes=args.minutes, trace=True, fault_weights=weights)
        if args.plant:
            with planted(args.plant):
                result = simulate(config)
        else:
            result = simulate(config)
        print("\n".join(render(result.trace, args.trace)))
        for violation in result.verdict.violations:
            print(violation)
        return 1 if result.verdict.violations else 0
    seeds = (
        range(args.seed, args.seed + 1)
        if args.seed is not None
        else range(args.first, args.first + args.seeds)
    )
    began = time.perf_counter()
    outcomes = run_many(seeds, args.minutes, args.workers, args.plant, bool(args.plant), weights)
    wall = time.perf_counter() - began
    replay = (f" --plant {args.plant}" if args.plant else "") + "".join(
        f" --weight {k}={v:g}" for k, v in weights.items()
    )
    return report(outcomes, args.minutes, wall, replay)


def _weight(text: str) -> tuple[str, float]:
    fault, _, value = text.partition("=")
    if fault not in FAULT_WEIGHTS:
        raise argparse.ArgumentTypeError(f"no fault {fault!r}: one of {', '.join(FAULT_WEIGHTS)}")
    try:
        return fault, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the weight is a number (FAULT=N)") from None


def report(outcomes: list[SeedOutcome], minutes: float, wall: float, replay: str) -> int:
    bad = [o for o in outcomes if o.violations]
    started = sum(o.started for o in outcomes)
    skipped: Counter[str] = Counter()
    for outcome in outcomes:
        skipped.update(outcome.skipped)
    print(
        f"{len(outcomes)} seeds x {minutes:g} simulated minutes: {started} fires started, "
        f"{sum(o.expected for o in outcomes)} instants checked for coverage, "
        f"{sum(o.abandoned for o in outcomes)} abandoned (claimed, member died before the "
        f"start), {sum(o.reruns for o in outcomes)} orphans run again (at-least-once), "
        f"{len(bad)} seeds with violations; {wall:.1f}s"
    )
    print("records left: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    for outcome in bad:
        print(
            f"\nseed {outcome.seed}: {len(outcome.violations)} violations "
            f"(replay: scripts/simulate --seed {outcome.seed} --minutes {minutes:g}"
            f"{replay} --trace JOB)"
        )
        for violation in outcome.violations[:10]:
            print(f"  {violation}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
