"""ClusterExecutor (zksched/integrations/apscheduler.py) with a fake cluster: which run times
it claims and submits, what it records when runs end, and what it logs (once)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apscheduler.executors.base import MaxInstancesReachedError
from apscheduler.schedulers.background import BackgroundScheduler

from zksched.app.coordination import AppClaim, claim_instant
from zksched.integrations.apscheduler import ClusterExecutor, current_claim


class FakeCluster:
    """Claims are won once per (name, instant) across every executor sharing one fake."""

    def __init__(self) -> None:
        self.connected = True
        self.taken: set[tuple[str, datetime]] = set()
        self.asked: list[tuple[str, datetime]] = []
        self.finished: list[tuple[str, str, str | None]] = []
        self.done = threading.Event()
        self.stopped = False

    def claim(self, name: str, instant: datetime) -> AppClaim | None:
        when = claim_instant(instant)
        self.asked.append((name, when))
        if (name, when) in self.taken:
            return None
        self.taken.add((name, when))
        key = f"{name}@{when:%Y-%m-%dT%H:%M:%SZ}"
        return AppClaim(name, when, key, len(self.taken), "fake", None)  # type: ignore[arg-type]

    def finish(self, claim: AppClaim, status: str = "ok", error: str | None = None) -> bool:
        self.finished.append((claim.key, status, error))
        self.done.set()
        return True

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


def started(cluster: FakeCluster, **options: Any) -> tuple[BackgroundScheduler, ClusterExecutor]:
    """A paused scheduler (its jobs get their defaults, but its timer never submits): the
    tests call submit_job themselves."""
    executor = ClusterExecutor(cluster, max_workers=2, **options)  # type: ignore[arg-type]
    scheduler = BackgroundScheduler(executors={"default": executor}, timezone=UTC)
    scheduler.start(paused=True)
    schedulers.append(scheduler)
    return scheduler, executor


schedulers: list[BackgroundScheduler] = []


@pytest.fixture(autouse=True)
def shut_down() -> Iterator[None]:
    yield
    while schedulers:
        schedulers.pop().shutdown(wait=True)


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def wait_finished(cluster: FakeCluster, n: int) -> None:
    for _ in range(200):
        if len(cluster.finished) >= n:
            return
        cluster.done.wait(0.05)
        cluster.done.clear()
    raise AssertionError(f"only {cluster.finished} finished")


def test_only_won_run_times_run_and_each_end_is_recorded(cluster: FakeCluster) -> None:
    ran: list[str] = []
    scheduler, first = started(cluster)
    _, second = started(cluster)

    def tick() -> None:
        claim = current_claim()  # the job sees the claim of the run time it runs for
        ran.append(claim.key if claim else "no claim")

    job = scheduler.add_job(tick, "interval", seconds=1, id="tick", misfire_grace_time=30)
    t0 = now()
    first.submit_job(job, [t0 - timedelta(seconds=1), t0])
    second.submit_job(job, [t0])  # the other process: already claimed, nothing runs
    wait_finished(cluster, 2)
    assert ran == [f"tick@{t:%Y-%m-%dT%H:%M:%SZ}" for t in (t0 - timedelta(seconds=1), t0)]
    assert current_claim() is None
    assert sorted(s for _, s, _ in cluster.finished) == ["ok", "ok"]
    assert cluster.asked.count(("tick", t0)) == 2


def test_a_raising_job_is_recorded_failed_with_type_and_message(cluster: FakeCluster) -> None:
    def broken() -> None:
        raise ValueError("no invoice")

    scheduler, executor = started(cluster)
    job = scheduler.add_job(broken, "interval", seconds=1, id="billing.run")
    executor.submit_job(job, [now()])
    wait_finished(cluster, 1)
    (_, status, error), *_ = cluster.finished
    assert (status, error) == ("failed", "raised ValueError: no invoice")


def test_prefix_and_sub_second_run_times_name_one_claim(cluster: FakeCluster) -> None:
    scheduler, executor = started(cluster, prefix="aps.")
    job = scheduler.add_job(lambda: None, "interval", seconds=1, id="tick")
    t0 = now()
    executor.submit_job(job, [t0 + timedelta(milliseconds=100), t0 + timedelta(milliseconds=600)])
    wait_finished(cluster, 1)
    assert cluster.asked == [("aps.tick", t0)]


def test_run_times_past_the_misfire_grace_are_not_claimed(cluster: FakeCluster) -> None:
    scheduler, executor = started(cluster)
    job = scheduler.add_job(lambda: None, "interval", seconds=1, id="tick", misfire_grace_time=5)
    t0 = now()
    executor.submit_job(job, [t0 - timedelta(seconds=60), t0])
    wait_finished(cluster, 1)
    assert [when for _, when in cluster.asked] == [t0]


def test_bad_ids_and_outages_skip_and_log_once(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "zksched.integrations.apscheduler")
    scheduler, executor = started(cluster)
    bad = scheduler.add_job(lambda: None, "interval", seconds=1, id="reports/daily")
    for _ in range(3):
        executor.submit_job(bad, [now()])
    said = [r for r in caplog.records if "reports/daily" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.ERROR
    assert "id=" in said[0].getMessage()

    good = scheduler.add_job(lambda: None, "interval", seconds=1, id="tick")
    cluster.connected = False
    for _ in range(3):
        executor.submit_job(good, [now()])
    outage = [r for r in caplog.records if "not connected" in r.getMessage()]
    assert len(outage) == 1
    assert cluster.asked == []  # nothing was claimed or run without ZooKeeper
    cluster.connected = True
    executor.submit_job(good, [now()])
    wait_finished(cluster, 1)
    assert any("connected to ZooKeeper again" in r.getMessage() for r in caplog.records)


def test_generated_ids_are_warned_about_once(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, executor = started(cluster)
    # two instances allowed: the first run may still be going when the second is submitted
    job = scheduler.add_job(lambda: None, "interval", seconds=1, max_instances=2)  # uuid4 id
    executor.submit_job(job, [now()])
    executor.submit_job(job, [now() + timedelta(seconds=1)])
    assert len([r for r in caplog.records if "generated id" in r.getMessage()]) == 1
    wait_finished(cluster, 2)


def test_a_job_at_max_instances_is_refused_before_any_claim(cluster: FakeCluster) -> None:
    release = threading.Event()
    scheduler, executor = started(cluster)
    job = scheduler.add_job(release.wait, "interval", seconds=1, id="slow", args=[5])
    t0 = now()
    executor.submit_job(job, [t0])
    with pytest.raises(MaxInstancesReachedError):
        executor.submit_job(job, [t0 + timedelta(seconds=1)])
    assert cluster.asked == [("slow", t0)]  # the second run time is left to other processes
    release.set()
    wait_finished(cluster, 1)


def test_the_scheduler_s_shutdown_stops_the_cluster_after_the_runs(cluster: FakeCluster) -> None:
    """A worker's graceful exit (`scheduler.shutdown()`) left the Cluster running: its run
    times and leadership waited for the session to expire unless the app stopped it too."""
    scheduler, executor = started(cluster)
    release = threading.Event()
    job = scheduler.add_job(release.wait, "date", run_date=now(), args=[5], id="slow")
    executor.submit_job(job, [now()])
    shutting = threading.Thread(target=schedulers.pop().shutdown, kwargs={"wait": True})
    shutting.start()
    shutting.join(0.3)
    assert shutting.is_alive() and not cluster.stopped  # the run is still under way
    release.set()
    shutting.join(5)
    assert cluster.stopped and [s for _, s, _ in cluster.finished] == ["ok"]

    kept = FakeCluster()
    scheduler, _ = started(kept, stop_cluster=False)
    schedulers.pop().shutdown(wait=True)
    assert not kept.stopped
