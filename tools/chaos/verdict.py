"""What a scenario's evidence is judged to be: duplicates, gaps and abandoned instants,
delays, failover times against their bounds, and `zksched audit`'s own verdict."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from tools.chaos.evidence import FaultEvent, SeenFire, failover_time, read_fires, recorded_keys
from tools.chaos.lab import ChaosCluster
from tools.chaos.scenarios import ScenarioContext
from zksched.core.firekey import format_utc
from zksched.core.schedule import Schedule


@dataclass
class ScenarioResult:
    scenario: str
    seed: int
    duration_s: float
    members: int
    session_timeout_s: float
    span: tuple[str, str] = ("", "")
    expected: int = 0  # instants in the measured span
    fires: int = 0  # fires recorded, whole run
    duplicates: int = 0
    gaps: int = 0
    abandoned: int = 0
    missing: list[str] = field(default_factory=list)  # a few gaps/abandoned, with why
    crash_failover_s: list[float] = field(default_factory=list)
    graceful_failover_s: list[float] = field(default_factory=list)
    # the bounds they are held to: session timeout + 1 s, and 1 s, each plus the p90 start
    # delay of the run's fires that no fault delayed (steady_delay_s)
    crash_bound_s: float = 0.0
    graceful_bound_s: float = 0.0
    delay_ms: dict[str, float] = field(default_factory=dict)
    audit: str = "not run"
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    workdir: str = ""

    @property
    def passed(self) -> bool:
        return not self.failures


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def steady_delay_s(
    fires: list[SeenFire], faults: list[FaultEvent], session_timeout: float
) -> float:
    """The p90 start delay of the fires no fault delayed: those due outside every fault's
    reach (a second before it to the session timeout and 2 s after). The median of every
    fire when fewer than 20 are left (a run made of faults: handovers are far fewer)."""
    steady = [
        f.started - f.instant
        for f in fires
        if not any(x.at - 1 <= f.instant <= x.at + session_timeout + 2 for x in faults)
    ]
    if len(steady) >= 20:
        return _percentile(steady, 0.9)
    return _percentile([f.started - f.instant for f in fires], 0.5) if fires else 0.0


def expected_keys(schedule: Schedule, names: list[str], low: float, high: float) -> set[str]:
    """The fire keys of every job in `names` due between `low` and `high` (epoch seconds)."""
    start, end = datetime.fromtimestamp(low, UTC), datetime.fromtimestamp(high, UTC)
    instants = [format_utc(i) for i in schedule.fires_between(start, end)]
    return {f"{name}@{instant}" for name in names for instant in instants}


def run_audit(cluster: ChaosCluster, since: float) -> tuple[str, list[str]]:
    """`zksched audit`'s verdict in one line, and the fire keys it calls gaps (a few)."""
    iso = format_utc(datetime.fromtimestamp(int(since), UTC))
    try:
        done = cluster.zksched("audit", "--since", iso, "--json", timeout=120)
    except subprocess.TimeoutExpired:
        return "audit timed out", []
    if done.returncode != 0 and "No such command" in done.stderr:
        return "audit unavailable", []
    try:
        data = json.loads(done.stdout)
        totals = data.get("totals", {})
        verdict = "clean" if data.get("clean") else "NOT clean"
        shown = ", ".join(
            f"{k} {totals[k]}" for k in ("ran", "gaps", "duplicates", "abandoned") if k in totals
        )
        gaps = [f"{j['name']}@{g}" for j in data.get("jobs", []) for g in j.get("gaps", [])]
        return (f"{verdict} ({shown})" if shown else verdict), gaps[:5]
    except (ValueError, AttributeError, KeyError, TypeError):
        first = (done.stderr.strip() or done.stdout.strip()).splitlines()[:1]
        return f"audit failed (exit {done.returncode}): {first[0] if first else ''}", []


def judge(
    result: ScenarioResult, ctx: ScenarioContext, cluster: ChaosCluster, expected: set[str]
) -> None:
    """Count the fire log against `expected` and the faults, into `result` and its failures."""
    fires = read_fires(cluster.fire_log)
    counts = recorded_keys(cluster.fire_log)
    result.fires = sum(counts.values())
    dups = {k: n for k, n in counts.items() if n > 1}
    result.duplicates = sum(n - 1 for n in dups.values())
    for key in sorted(dups)[:5]:
        result.missing.append(f"{key} ran {dups[key]} times")
    alive = {m.member_id for m in cluster.members if m.alive}
    for key in sorted(expected - set(counts)):
        job, instant = key.split("@", 1)
        try:
            record = cluster.fire_record(job, instant)
        except (KazooException, KazooTimeoutError):
            record = None
        if record is not None and record.state == "running" and record.member_id not in alive:
            result.abandoned += 1
            why = f"abandoned (claimed by {record.member_id}, which died before starting it)"
        else:
            result.gaps += 1
            why = (
                f"gap ({record.state}: {record.skip_reason}, by {record.member_id})"
                if record
                else "gap (no claim)"
            )
        if len(result.missing) < 12:
            result.missing.append(f"{key} {why}")
    in_span = [
        f
        for f in fires
        if f"{f.job}@{format_utc(datetime.fromtimestamp(f.instant, UTC))}" in expected
    ]
    delays = [(f.started - f.instant) * 1000 for f in in_span]
    if delays:
        result.delay_ms = {
            "p50": round(_percentile(delays, 0.5), 1),
            "p99": round(_percentile(delays, 0.99), 1),
            "max": round(max(delays), 1),
        }
    for fault in ctx.faults:
        took = failover_time(fault, fires)
        if took is None:
            continue
        (result.graceful_failover_s if fault.graceful else result.crash_failover_s).append(
            round(took, 3)
        )
    if result.duplicates:
        result.failures.append(f"{result.duplicates} duplicate fires")
    if result.gaps:
        result.failures.append(f"{result.gaps} gaps")
    # a handover's fire starts as late as any other fire of the run besides: on a loaded
    # host that is seconds, failover or not (tens of ms quiet)
    usual = steady_delay_s(in_span, ctx.faults, cluster.session_timeout)
    result.crash_bound_s = round(cluster.session_timeout + 1.0 + usual, 2)
    result.graceful_bound_s = round(1.0 + usual, 2)
    if ctx.check_failover:
        slow = [t for t in result.crash_failover_s if t > result.crash_bound_s]
        if slow:
            result.failures.append(f"crash failover {max(slow):.2f}s > {result.crash_bound_s:g}s")
        slow = [t for t in result.graceful_failover_s if t >= result.graceful_bound_s]
        if slow:
            result.failures.append(
                f"graceful handover {max(slow):.2f}s >= {result.graceful_bound_s:g}s"
            )
