"""The benchmarks' registry: `@benchmark(name, help, arguments)` makes a function a
subcommand of `scripts/bench`; what each one gets (`BenchContext`) and returns (`Result`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Result = dict[str, Any]


@dataclass(frozen=True)
class BenchContext:
    """What every benchmark gets: the global flags and its own parsed arguments."""

    quick: bool
    out_dir: Path
    args: argparse.Namespace


@dataclass(frozen=True)
class Benchmark:
    name: str
    help: str
    run: Callable[[BenchContext], Result]
    add_arguments: Callable[[argparse.ArgumentParser], None]


BENCHMARKS: dict[str, Benchmark] = {}


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def benchmark(
    name: str,
    help: str,
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments,
) -> Callable[[Callable[[BenchContext], Result]], Callable[[BenchContext], Result]]:
    """Register a benchmark as a subcommand; adding one is one decorated function."""

    def register(run: Callable[[BenchContext], Result]) -> Callable[[BenchContext], Result]:
        BENCHMARKS[name] = Benchmark(name, help, run, arguments)
        return run

    return register


def job_counts(parser: argparse.ArgumentParser, default: str) -> None:
    """`--jobs N [N ...]`: the job counts a benchmark measures (`default` says its own)."""
    parser.add_argument(
        "--jobs", type=at_least(1), nargs="+", metavar="N", help=f"job counts (default {default})"
    )


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= minimum, refused with a usage error otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse
