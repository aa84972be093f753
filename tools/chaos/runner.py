"""One scenario from start to verdict: its cluster, its jobs and members, the warm-up, the
faults, the settling of catch-up, and the judging of the evidence."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from pathlib import Path

from tools.chaos.evidence import read_fires, recorded_keys, recording_jobs
from tools.chaos.lab import ChaosCluster, until
from tools.chaos.scenarios import ChaosScenario, ScenarioContext
from tools.chaos.verdict import ScenarioResult, expected_keys, judge, run_audit
from zksched.core.firekey import format_utc
from zksched.core.schedule import Schedule


def _warm_up(cluster: ChaosCluster, names: list[str], every_second: bool) -> None:
    """Until every member has loaded the job table and sees every member, and (fast jobs)
    every job has fired at an instant due after that, by its owner in the settled table."""

    def loaded() -> bool:
        return all(
            any(e.get("jobs") == len(names) for e in m.events("jobs"))
            and m.members_seen() == len(cluster.members)
            for m in cluster.members
        )

    until(loaded, 120, "every member to load the job table and see every member")
    if every_second:
        # Fires of earlier instants may be by a member that has handed the job on since (the
        # first to start owns everything for a moment); the victims are picked by who fired last.
        since = time.time()

        def all_fired() -> bool:
            return {f.job for f in read_fires(cluster.fire_log) if f.instant > since} >= set(names)

        until(all_fired, 30, "every job to fire once")


def run_scenario(
    scenario: ChaosScenario,
    *,
    duration: float,
    seed: int,
    members: int = 3,
    session_timeout: float = 3.0,
    workdir: Path,
) -> ScenarioResult:
    """Start a cluster, inject the scenario's faults for `duration` seconds, judge the evidence."""
    rng = random.Random(f"{seed}:{scenario.name}")
    result = ScenarioResult(scenario.name, seed, duration, members, session_timeout)
    result.workdir = str(workdir)
    cluster = ChaosCluster.start(
        workdir, ensemble=scenario.ensemble, session_timeout=session_timeout
    )
    try:
        prefix = "burst" if scenario.job_count > 100 else "job"
        names = [f"{prefix}-{i:04d}" for i in range(scenario.job_count)]
        cluster.apply(
            recording_jobs(
                names,
                cluster.fire_log,
                schedule=scenario.schedule,
                overlap=scenario.overlap,
                history=scenario.history,
            )
        )
        offsets = scenario.clock_offsets(rng, members) if scenario.clock_offsets else []
        for i in range(members):
            cluster.start_member(
                proxied=scenario.proxied, clock_offset=offsets[i] if offsets else 0.0
            )
        if offsets:
            result.notes.append("clock offsets " + ", ".join(f"{o:+.2f}s" for o in offsets))
        cluster.wait_members(cluster.members, 60)
        _warm_up(cluster, names, every_second=scenario.schedule == "* * * * * *")
        span_from = float(int(time.time()) + 1)
        ctx = ScenarioContext(cluster, rng, duration, members)
        try:
            scenario.inject(ctx)
        except Exception as exc:  # the evidence so far is still judged
            result.failures.append(f"fault injection failed: {type(exc).__name__}: {exc}")
        span_to = float(int(time.time()))
        result.notes += ctx.notes
        result.span = (
            format_utc(datetime.fromtimestamp(span_from, UTC)),
            format_utc(datetime.fromtimestamp(span_to, UTC)),
        )
        expected = expected_keys(Schedule.parse(scenario.schedule), names, span_from, span_to)
        result.expected = len(expected)
        # catch-up runs what the faults left behind; give it the time a takeover may take
        settle = session_timeout + 15 + (0.05 * len(expected) if scenario.job_count > 100 else 0)
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and expected - set(recorded_keys(cluster.fire_log)):
            time.sleep(0.25)
        time.sleep(1.0)  # a late duplicate would show now
        result.audit, audit_gaps = run_audit(cluster, span_from)
        judge(result, ctx, cluster, expected)
        recorded = recorded_keys(cluster.fire_log)
        for key in audit_gaps:  # where the audit and the commands' own evidence disagree
            ran = f"ran {recorded[key]}x per the fire file" if key in recorded else "not run"
            result.missing.append(f"audit gap {key}: {ran}")
    finally:
        cluster.close()
    return result
