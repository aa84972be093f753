"""How the benchmarks show their results: progress on stderr, Markdown tables on stdout,
percentiles of a sample."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence


def progress(message: str) -> None:
    # stderr, so that stdout carries only the result table and can be pasted into docs.
    print(message, file=sys.stderr, flush=True)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max by nearest rank, in the unit given; NaN-free (empty: zeros)."""
    if not values:
        return {"count": 0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    return {
        "count": len(ordered),
        "p50": round(rank(50), 3),
        "p95": round(rank(95), 3),
        "p99": round(rank(99), 3),
        "max": round(ordered[-1], 3),
    }


def ms_row(label: str, stats: Mapping[str, float]) -> list[str]:
    return [
        label,
        f"{int(stats['count']):,}",
        *(f"{stats[k]:.1f}" for k in ("p50", "p95", "p99", "max")),
    ]
