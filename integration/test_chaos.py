"""Short versions of every `scripts/chaos` scenario, each against a cluster of its own.

Every test asserts the acceptance of issue 5: zero duplicates, zero gaps (outages are caught
up), a crash handed over within the session timeout plus one second, a graceful stop within
one second (each plus the run's p90 start delay: a loaded host starts every fire late); and
that the faults really happened. The long soak is `scripts/chaos --duration
10m` (docs/reliability.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tools.chaos.runner import run_scenario
from tools.chaos.scenarios import SCENARIOS
from tools.chaos.verdict import ScenarioResult

SEED = 20261129
SESSION_TIMEOUT = 3.0


def run(tmp_path: Path, name: str, duration: float, **changes: object) -> ScenarioResult:
    scenario = dataclasses.replace(SCENARIOS[name], **changes)  # type: ignore[arg-type]
    result = run_scenario(
        scenario,
        duration=duration,
        seed=SEED,
        members=3,
        session_timeout=SESSION_TIMEOUT,
        workdir=tmp_path / name,
    )
    detail = f"{result.failures}; {result.missing}; notes {result.notes}; logs {result.workdir}"
    assert result.expected > 0, detail
    assert result.duplicates == 0, detail
    assert result.gaps == 0, detail
    assert result.passed, detail
    return result


def test_kill9_hands_over_within_the_session_timeout(tmp_path: Path) -> None:
    result = run(tmp_path, "kill9", 8)
    assert result.crash_failover_s, "no kill took any job over"
    assert max(result.crash_failover_s) <= result.crash_bound_s


def test_rolling_restart_hands_over_within_a_second(tmp_path: Path) -> None:
    result = run(tmp_path, "rolling", 1)
    assert result.graceful_failover_s, "no stop handed any job over"
    assert max(result.graceful_failover_s) < result.graceful_bound_s


def test_partition_shorter_and_longer_than_the_session(tmp_path: Path) -> None:
    result = run(tmp_path, "partition", 1)
    assert result.crash_failover_s, "the long partition took no job over"
    assert max(result.crash_failover_s) <= result.crash_bound_s


def test_ensemble_leader_and_another_server_killed(tmp_path: Path) -> None:
    result = run(tmp_path, "ensemble-leader", 1)
    assert any("leader" in note for note in result.notes), result.notes
    assert len(result.notes) >= 2, result.notes


def test_zookeeper_down_for_ten_seconds_is_caught_up(tmp_path: Path) -> None:
    result = run(tmp_path, "zk-outage", 1)
    assert "ZooKeeper down 10s" in result.notes
    # the outage's instants ran late (caught up), not never
    assert result.delay_ms["max"] > 5000, result.delay_ms


def test_slow_zookeeper(tmp_path: Path) -> None:
    result = run(tmp_path, "slow-zk", 5)
    # the delay is really there: every fire waits for several 400 ms round trips
    assert result.delay_ms["p50"] > 300, result.delay_ms


def test_clock_skew_between_members(tmp_path: Path) -> None:
    result = run(tmp_path, "clock-skew", 5)
    assert any(note.startswith("restarted") for note in result.notes), result.notes


def test_burst_of_2000_jobs_due_at_once(tmp_path: Path) -> None:
    # bursts every 20 s, and at least one in the span: the span is the whole seconds after
    # the start of the injection, so 21 s hold 20 of them, one a multiple of 20
    result = run(tmp_path, "burst", 21)
    assert result.expected >= 2000 and result.expected % 2000 == 0, result.expected


def test_membership_flapping(tmp_path: Path) -> None:
    result = run(tmp_path, "flapping", 5)
    assert len(result.graceful_failover_s) >= 1, result.notes


def test_a_long_partition_while_another_member_recovers_from_a_short_one(tmp_path: Path) -> None:
    result = run(tmp_path, "partition-overlap", 1)
    assert result.crash_failover_s, "the long partition took no job over"
    assert max(result.crash_failover_s) <= result.crash_bound_s
