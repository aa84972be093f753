"""`scripts/simulate`: run the cluster simulator over many seeds, in parallel.

    scripts/simulate --seeds 200 --minutes 10          the CI soak
    scripts/simulate --seed 1234 --trace job3          one seed, its trace for job3
    scripts/simulate --plant paused-fired --seeds 50   show that a planted bug is caught

Exit 0 when every seed holds every guarantee; 1 otherwise (each failing seed is printed
with its violations and the command that replays it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from sim.plantings import PLANTINGS, planted
from sim.scenario import SimConfig, simulate
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


def run_seed(seed: int, minutes: float, plant: str | None = None) -> SeedOutcome:
    if plant is None:
        result = simulate(SimConfig(seed, minutes=minutes))
    else:
        with planted(plant):
            result = simulate(SimConfig(seed, minutes=minutes))
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


def run_many(
    seeds: range,
    minutes: float,
    workers: int,
    plant: str | None = None,
    stop_on_first: bool = False,
) -> list[SeedOutcome]:
    outcomes: list[SeedOutcome] = []
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(run_seed, s, minutes, plant) for s in seeds]
        for future in futures:
            outcome = future.result()
            outcomes.append(outcome)
            if stop_on_first and outcome.violations:
                for rest in futures:
                    rest.cancel()
                break
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
        "--trace",
        metavar="TEXT",
        help="with --seed: print its trace (lines naming TEXT, and the cluster's own events)",
    )
    args = parser.parse_args(argv)
    if args.seed is not None and args.trace is not None:
        config = SimConfig(args.seed, minutes=args.minutes, trace=True)
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
    outcomes = run_many(seeds, args.minutes, args.workers, args.plant, bool(args.plant))
    wall = time.perf_counter() - began
    return report(outcomes, args.minutes, wall, args.plant)


def report(outcomes: list[SeedOutcome], minutes: float, wall: float, plant: str | None) -> int:
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
            f"{f' --plant {plant}' if plant else ''} --trace JOB)"
        )
        for violation in outcome.violations[:10]:
            print(f"  {violation}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
