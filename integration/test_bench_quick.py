"""Every benchmark runs in `--quick` mode and writes a JSON result that says what it measured.

A smoke test, so that a broken benchmark is caught in CI: no speed is asserted here (that is
what the full runs in docs/benchmarks.md are for), only that each one runs end to end on its
own ZooKeeper and that its safety figures (lost and doubled instants) are zero.
Three run at a time: each is mostly waiting on scheduled instants and session timeouts.
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = [
    "functions",  # the longest first: three at a time
    "members",
    "owners",
    "fire-delay",
    "failover",
    "zk-requests",
    "scale",
    "profile",
    "spawn-floor",
    "job-memory",
    "join-cost",
]


def run_quick(name: str, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    folder = out / name
    done = subprocess.run(
        [str(REPO / "scripts" / "bench"), "--quick", "--out", str(folder), name],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    files = sorted(folder.glob(f"{name}-*.json")) if folder.exists() else []
    record = json.loads(files[-1].read_text()) if files else {}
    return done, record


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    with ThreadPoolExecutor(3) as pool:
        runs = dict(zip(BENCHMARKS, pool.map(lambda n: run_quick(n, out), BENCHMARKS), strict=True))
    return runs


@pytest.mark.parametrize("name", BENCHMARKS)
def test_quick_benchmark_runs_and_writes_its_json(name: str, quick_results: dict[str, Any]) -> None:
    done, record = quick_results[name]
    assert done.returncode == 0, done.stderr[-3000:]
    assert record["benchmark"] == name
    assert record["quick"] is True
    assert record["machine"]["cpu_count"]
    assert record["results"]


def test_quick_fire_delay_compares_with_apscheduler(quick_results: dict[str, Any]) -> None:
    run = quick_results["fire-delay"][1]["results"]["runs"][0]
    for side in ("zksched", "apscheduler"):
        assert run[side]["delay_ms"]["count"] == run[side]["expected"] > 0
        assert run[side]["lost"] == run[side]["doubled"] == 0
    assert run["p99_ratio"] > 0
    # the at-most-once window of every fire: claimed, then started
    window = run["zksched"]["claimed_to_started_ms"]
    assert window["count"] == run["zksched"]["delay_ms"]["count"]
    assert 0 <= window["p50"] <= window["max"]


def test_quick_failover_loses_and_doubles_nothing(quick_results: dict[str, Any]) -> None:
    results = quick_results["failover"][1]["results"]
    assert len(results["seconds"]["SIGKILL"]) == len(results["seconds"]["SIGTERM"]) == 1
    for mode in ("at-most-once", "at-least-once"):
        got = results["delivery"][mode]
        assert got["lost"] == got["doubled"] == 0, (mode, got)
        assert got["lost_records"] == {}


def test_quick_zk_requests_counts_every_member_count(quick_results: dict[str, Any]) -> None:
    rows = quick_results["zk-requests"][1]["results"]["rows"]
    assert [r["members"] for r in rows] == [1, 3]
    for row in rows:
        assert row["fires"] > 0
        assert sum(row["by_type_per_fire"].values()) == pytest.approx(row["per_fire"], abs=0.02)


def test_quick_scale_fires_the_whole_burst(quick_results: dict[str, Any]) -> None:
    (row,) = quick_results["scale"][1]["results"]["rows"]
    assert row["burst_delay_ms"]["count"] == row["burst"]
    assert row["burst_lost"] == row["burst_doubled"] == 0
    assert all(mb > 0 for mb in row["rss_mb"])
    (burst,) = row["bursts"]  # the same burst, with the spawn floor measured before it
    assert burst["burst_delay_ms"] == row["burst_delay_ms"]
    assert burst["floor_ms"]["count"] == row["burst"]
    assert burst["p99_to_floor"] > 0


def test_quick_members_settles_each_change_and_loses_nothing(quick_results: dict[str, Any]) -> None:
    results = quick_results["members"][1]["results"]
    assert [r["zookeeper"] for r in results["rows"]] == ["standalone", "ensemble"]
    for row in results["rows"]:
        assert [c["kind"] for c in row["changes"]] == ["leave", "join"]
        light = row["members"] - row["full"]
        for change in row["changes"]:
            assert change["complete"], change
            assert change["moved"] > 0
            # every light member was told, and read the folder again
            assert change["light"]["counts"]["watch notifications"] >= light - 1
            assert change["light"]["all_read_s"] is not None
            for daemon in change["full"].values():
                assert daemon["seen_s"] is not None
                # what each full daemon took and dropped is what the change moves
                assert (daemon["taken"], daemon["dropped"]) == (
                    daemon["expected_taken"],
                    daemon["expected_dropped"],
                )
        rolling = row["rolling"]
        assert len(rolling["restarts"]) == row["full"]
        every = rolling["catchup_all"]
        assert every["instants"] > 0
        assert every["lost"] == every["doubled"] == 0, every
        assert rolling["catchup_latest"]["doubled"] == 0


def test_quick_profile_names_the_phases(quick_results: dict[str, Any]) -> None:
    results = quick_results["profile"][1]["results"]
    assert results["phases_ms"]["due -> claimed (lock + claim)"]["count"] > 0
    assert "fire" in results["cprofile"]


def test_quick_spawn_floor_starts_every_command(quick_results: dict[str, Any]) -> None:
    results = quick_results["spawn-floor"][1]["results"]
    assert results["start_delay_ms"]["count"] == results["burst"] == 200


def test_quick_functions_compares_with_apscheduler_and_the_daemon(
    quick_results: dict[str, Any],
) -> None:
    results = quick_results["functions"][1]["results"]
    (delay,) = results["delay"]
    for side in ("zksched", "apscheduler"):
        assert delay[side]["delay_ms"]["count"] == delay[side]["expected"] > 0
        assert delay[side]["lost"] == delay[side]["doubled"] == 0
    assert results["requests"]["daemon_per_fire"] > 0 and results["requests"]["app_per_fire"] > 0
    (step,) = results["throughput"]
    assert step["lost"] == step["doubled"] == 0 and step["fires_per_s"] > 0


def test_quick_scale_measures_the_change_alone(tmp_path: Path) -> None:
    """`scale --change-only`: ready, then a leave and a join with nothing else going on (no
    apply between ready and the change, no probes to count)."""
    bench = [str(REPO / "scripts" / "bench"), "--quick", "--out", str(tmp_path)]
    done = subprocess.run(
        [*bench, "scale", "--change-only"],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(f.read_text()) for f in tmp_path.glob("scale-*.json")]
    (row,) = record["results"]["rows"]
    change = row["change"]
    assert record["results"]["change_only"] and change["probes"] == 0
    assert change["resume_apply_s"] == 0.0 and change["change_lost"] is None
    assert change["leave_settled_s"] > 0 and change["join_settled_s"] >= 0
    assert len(change["rss_mb_before"]) == len(change["rss_mb_after"]) == 3
