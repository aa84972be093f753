"""DaemonMetrics: what the fire path, the skip log and catch-ups feed in comes out of
the Prometheus exposition, on a registry of each daemon's own."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from zksched.runtime.status.metrics import DaemonMetrics


def samples(metrics: DaemonMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def make(
    owned: float = 0, members: float = 0, connected: float = 0, offset: float | None = None
) -> DaemonMetrics:
    return DaemonMetrics(
        owned_jobs=lambda: owned,
        members=lambda: members,
        session_connected=lambda: connected,
        clock_offset=lambda: offset,
    )


def fire_event(job: str, status: str, delay_ms: float, ran_s: float) -> dict[str, object]:
    return {
        "event": "fire",
        "job": job,
        "status": status,
        "delay_ms": delay_ms,
        "started_ts": 1000.0,
        "finished_ts": 1000.0 + ran_s,
    }


def test_fires_are_counted_by_job_and_outcome_with_delay_and_duration() -> None:
    m = make()
    m.on_fire(fire_event("backup", "ok", 3.0, 0.2))
    m.on_fire(fire_event("backup", "ok", 40.0, 2.0))
    m.on_fire(fire_event("backup", "failed", 700.0, 20.0))
    m.on_fire(fire_event("report", "timeout", -5.0, 0.0))  # a trigger: due = its own start
    got = samples(m)
    assert got[("zksched_fires_total", (("job", "backup"), ("outcome", "ok")))] == 2
    assert got[("zksched_fires_total", (("job", "backup"), ("outcome", "failed")))] == 1
    assert got[("zksched_fires_total", (("job", "report"), ("outcome", "timeout")))] == 1
    assert got[("zksched_fire_delay_seconds_count", ())] == 4
    assert got[("zksched_fire_delay_seconds_bucket", (("le", "0.005"),))] == 2  # 3 ms and < 0
    assert got[("zksched_fire_delay_seconds_bucket", (("le", "0.05"),))] == 3
    assert got[("zksched_fire_delay_seconds_bucket", (("le", "1.0"),))] == 4
    assert math.isclose(got[("zksched_fire_delay_seconds_sum", ())], 0.743)
    assert got[("zksched_run_duration_seconds_bucket", (("le", "0.5"),))] == 2
    assert got[("zksched_run_duration_seconds_bucket", (("le", "30.0"),))] == 4
    assert math.isclose(got[("zksched_run_duration_seconds_sum", ())], 22.2)


def test_skips_by_reason_and_by_job_and_catchups() -> None:
    m = make()
    m.on_skip("a", "already-claimed", 1)
    m.on_skip("b", "already-claimed", 1)
    m.on_skip("a", "outside-catchup-window", 7)
    m.on_catchup("a", 3)
    m.on_catchup("b", 1)
    got = samples(m)
    assert got[("zksched_skips_total", (("reason", "already-claimed"),))] == 2
    assert got[("zksched_skips_total", (("reason", "outside-catchup-window"),))] == 7
    key = ("zksched_job_skips_total", (("job", "a"), ("reason", "outside-catchup-window")))
    assert got[key] == 7
    assert got[("zksched_catchups_total", ())] == 2
    assert got[("zksched_catchup_instants_total", ())] == 4


def test_gauges_are_read_when_scraped() -> None:
    state = {"owned": 3.0, "offset": None}
    m = DaemonMetrics(
        owned_jobs=lambda: state["owned"] or 0.0,
        members=lambda: 2,
        session_connected=lambda: 1,
        clock_offset=lambda: state["offset"],
    )
    got = samples(m)
    assert got[("zksched_owned_jobs", ())] == 3
    assert got[("zksched_members", ())] == 2
    assert got[("zksched_session_connected", ())] == 1
    assert math.isnan(got[("zksched_clock_offset_seconds", ())])  # unknown is NaN, not 0
    state["owned"], state["offset"] = 5.0, -0.25
    got = samples(m)
    assert got[("zksched_owned_jobs", ())] == 5
    assert got[("zksched_clock_offset_seconds", ())] == -0.25


def test_two_daemons_in_one_process_keep_separate_counts() -> None:
    first, second = make(), make()  # the same metric names twice: no duplicate-name error
    first.on_skip("a", "paused", 1)
    assert samples(first)[("zksched_skips_total", (("reason", "paused"),))] == 1
    assert ("zksched_skips_total", (("reason", "paused"),)) not in samples(second)
