"""The chaos suite's report: one table row per scenario, and the results as JSON."""

from __future__ import annotations

import json
import os
import socket
import statistics
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from tools.chaos.verdict import ScenarioResult
from zksched.core.firekey import format_utc

HOSTNAME = socket.gethostname()


def _stats(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f}/{max(values):.2f}"


def format_table(results: list[ScenarioResult]) -> str:
    header = (
        "scenario", "fires", "dups", "gaps", "abandoned", "crash p50/max s",
        "graceful p50/max s", "delay p50/p99 ms", "audit", "verdict",
    )  # fmt: skip
    rows = [header]
    for r in results:
        delay = f"{r.delay_ms['p50']:.0f}/{r.delay_ms['p99']:.0f}" if r.delay_ms else "-"
        rows.append(
            (
                r.scenario,
                str(r.fires),
                str(r.duplicates),
                str(r.gaps),
                str(r.abandoned),
                _stats(r.crash_failover_s),
                _stats(r.graceful_failover_s),
                delay,
                r.audit,
                "PASS" if r.passed else "FAIL: " + "; ".join(r.failures),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    )


def write_json(path: Path, seed: int, results: list[ScenarioResult]) -> None:
    """The run's results, with the seed, the date and the machine, to `path`."""
    path.write_text(
        json.dumps(
            {
                "seed": seed,
                "date": format_utc(datetime.now(UTC)),
                "host": HOSTNAME,
                "cpus": os.cpu_count(),
                "results": [asdict(r) | {"passed": r.passed} for r in results],
            },
            indent=2,
        )
        + "\n"
    )
