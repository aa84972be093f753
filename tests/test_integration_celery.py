"""ClusterScheduler's pure rules (zksched/integrations/celery.py): the due instant every
replica names for crontab and interval entries, and which entries are refused at startup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.exceptions import ImproperlyConfigured
from celery.schedules import BaseSchedule, crontab, schedule

from zksched.app.coordination import AppClaim
from zksched.integrations.celery import (
    ClusterScheduler,
    crontab_due,
    due_instant,
    entry_problems,
    interval_due,
)

BERLIN = ZoneInfo("Europe/Berlin")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.fixture(scope="module")
def app() -> Celery:
    return Celery("t", broker="memory://", set_as_current=False)


def cron(app: Celery, **fields: str) -> crontab:
    return crontab(app=app, **fields)


@pytest.mark.parametrize(
    ("fields", "now", "due"),
    [
        # every minute: the minute of now, seconds 00, however late in the minute
        ({}, "2026-03-04T10:17:59.900+00:00", "2026-03-04T10:17:00+00:00"),
        ({}, "2026-03-04T10:17:00+00:00", "2026-03-04T10:17:00+00:00"),
        # */15: a replica that ticks late still names the latest crontab time
        ({"minute": "*/15"}, "2026-03-04T10:29:30+00:00", "2026-03-04T10:15:00+00:00"),
        # daily at 02:00: over midnight, back to yesterday's
        (
            {"minute": "0", "hour": "2"},
            "2026-03-04T01:59:59+00:00",
            "2026-03-03T02:00:00+00:00",
        ),
        # Celery's day rule: day of month AND day of week (the 13th that is a Friday)
        (
            {"minute": "0", "hour": "0", "day_of_month": "13", "day_of_week": "fri"},
            "2026-12-03T09:00:00+00:00",
            "2026-11-13T00:00:00+00:00",
        ),
        # Sunday is day 0
        (
            {"minute": "30", "hour": "6", "day_of_week": "0"},
            "2026-03-04T00:00:00+00:00",
            "2026-03-01T06:30:00+00:00",
        ),
    ],
)
def test_crontab_due_is_the_latest_crontab_minute_at_or_before_now(
    app: Celery, fields: dict[str, str], now: str, due: str
) -> None:
    assert crontab_due(cron(app, **fields), utc(now), UTC) == utc(due)


def test_crontab_due_is_the_same_from_any_replica_zone_and_in_the_app_zone(app: Celery) -> None:
    daily = cron(app, minute="0", hour="2")
    now = utc("2026-06-10T05:00:00+02:00")  # Berlin local 05:00, UTC 03:00
    # evaluated in the app's zone (Berlin: 02:00 local is 00:00 UTC), whatever now's offset
    expected = utc("2026-06-10T02:00:00+02:00")
    assert crontab_due(daily, now, BERLIN) == expected
    assert crontab_due(daily, now.astimezone(ZoneInfo("America/New_York")), BERLIN) == expected


def test_crontab_due_on_a_dst_jump_is_an_instant_not_after_now(app: Celery) -> None:
    # 2026-03-29: Berlin skips 02:00-03:00. At 03:10 local (01:10 UTC) the latest 02:30 that
    # is an instant at or before now is the previous day's
    at_230 = cron(app, minute="30", hour="2")
    now = utc("2026-03-29T03:10:00+02:00")
    due = crontab_due(at_230, now, BERLIN)
    assert due <= now
    assert due == utc("2026-03-28T02:30:00+01:00")


@pytest.mark.parametrize(
    ("every", "now", "due"),
    [
        (1, "2026-03-04T10:17:05.999+00:00", "2026-03-04T10:17:05+00:00"),
        (10, "2026-03-04T10:17:09.5+00:00", "2026-03-04T10:17:00+00:00"),
        (10, "2026-03-04T10:17:10+00:00", "2026-03-04T10:17:10+00:00"),
        (3600, "2026-03-04T10:59:59+00:00", "2026-03-04T10:00:00+00:00"),
        # 1.5 s buckets start at .0 and .5 of a second: named to the second, still distinct
        (1.5, "2026-03-04T10:17:04.6+00:00", "2026-03-04T10:17:04+00:00"),
    ],
)
def test_interval_due_is_the_bucket_start(every: float, now: str, due: str) -> None:
    assert interval_due(every, utc(now)) == utc(due)


def test_interval_buckets_agree_across_replica_phases() -> None:
    """Replicas tick at their own phase; inside one bucket they all name its start."""
    start = utc("2026-03-04T10:17:10+00:00")
    for offset_ms in (0, 1, 250, 999, 4999):
        now = start + timedelta(milliseconds=offset_ms)
        assert interval_due(5, now) == start


def test_due_instant_by_schedule_type(app: Celery) -> None:
    now = utc("2026-03-04T10:17:05.5+00:00")
    assert due_instant(schedule(timedelta(seconds=5), app=app), now) == utc(
        "2026-03-04T10:17:05+00:00"
    )
    assert due_instant(cron(app, minute="*/5"), now) == utc("2026-03-04T10:15:00+00:00")
    with pytest.raises(ValueError, match="neither a crontab nor an interval"):
        due_instant(BaseSchedule(app=app), now)  # a custom schedule type (solar, ...)
    with pytest.raises(ValueError, match="under 1 s"):
        due_instant(schedule(timedelta(milliseconds=500), app=app), now)


def test_entry_problems_name_each_entry(app: Celery) -> None:
    problems = entry_problems(
        [
            ("good-one", schedule(timedelta(seconds=1), app=app)),
            ("send report", cron(app)),
            ("fast", schedule(timedelta(milliseconds=100), app=app)),
        ]
    )
    assert len(problems) == 2
    assert "'send report'" in problems[0] and "rename" in problems[0]
    assert "'fast'" in problems[1]


def test_the_scheduler_refuses_a_bad_schedule_at_startup_before_connecting() -> None:
    app = Celery("t2", broker="memory://", set_as_current=False)
    app.conf.update(
        zksched_client_id="c1",
        zksched_zk="127.0.0.1:1",  # never reached: the schedule is refused first
        beat_schedule={"nightly report": {"task": "t", "schedule": crontab(minute="0")}},
    )
    with pytest.raises(ImproperlyConfigured, match="nightly report"):
        ClusterScheduler(app)
    lazy = ClusterScheduler(app, lazy=True)  # beat's introspection instance: no setup
    assert lazy.cluster is None


def test_a_missing_cluster_id_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZKSCHED_CLIENT_ID", raising=False)
    app = Celery("t3", broker="memory://", set_as_current=False)
    with pytest.raises(ImproperlyConfigured, match="zksched_client_id"):
        ClusterScheduler(app)


def test_an_unreachable_zookeeper_stops_beat_naming_its_config_keys_not_jobs() -> None:
    """It said "... to register jobs", although beat registers none."""
    from tools.zkserver import free_port
    from zksched import ClusterUnavailable

    app = Celery("t4", broker="memory://", set_as_current=False)
    hosts = f"127.0.0.1:{free_port()}"
    app.conf.update(zksched_client_id="c1", zksched_zk=hosts, zksched_connect_timeout=0.5)
    with pytest.raises(ClusterUnavailable) as caught:
        ClusterScheduler(app)
    message = str(caught.value)
    assert message.startswith(f"ClusterScheduler: cannot reach ZooKeeper at {hosts}")
    assert "zksched_zk" in message and "zksched_connect_timeout" in message
    assert "register" not in message


class FakeCluster:
    """Claims are won once per (name, instant) across every scheduler sharing one fake."""

    def __init__(self) -> None:
        self.connected = True
        self.taken: set[tuple[str, datetime]] = set()
        self.finished: list[tuple[str, str]] = []
        self.stopped = False

    def claim(self, name: str, instant: datetime) -> AppClaim | None:
        if (name, instant) in self.taken:
            return None
        self.taken.add((name, instant))
        key = f"{name}@{instant:%Y-%m-%dT%H:%M:%SZ}"
        return AppClaim(name, instant, key, len(self.taken), "fake", None)  # type: ignore[arg-type]

    def finish(self, claim: AppClaim, status: str = "ok", error: str | None = None) -> bool:
        self.finished.append((claim.key, status))
        return True

    def stop(self) -> None:
        self.stopped = True


def replica(app: Celery, cluster: FakeCluster, sent: list[dict[str, Any]]) -> ClusterScheduler:
    """A beat scheduler on `cluster` whose publishing is recorded instead of sent."""
    scheduler = ClusterScheduler(app, lazy=True)
    scheduler.cluster = cluster  # type: ignore[assignment]
    scheduler.update_from_dict(
        {"hb": {"task": "t.hb", "schedule": timedelta(seconds=5), "options": {"queue": "q"}}}
    )

    def apply_async(entry: Any, producer: Any = None, advance: bool = True) -> None:
        sent.append(entry.options)

    scheduler.apply_async = apply_async  # type: ignore[method-assign]
    return scheduler


def test_only_the_replica_that_claimed_sends_and_both_advance(app: Celery) -> None:
    cluster = FakeCluster()
    sent: list[dict[str, Any]] = []
    replicas = [replica(app, cluster, sent) for _ in range(2)]
    advanced = []
    for scheduler in replicas:
        entry = scheduler.schedule["hb"]
        advanced.append(scheduler.reserve(entry))  # beat's tick: reserve, then apply
        scheduler.apply_entry(entry)
    assert len(sent) == 1  # one send for the bucket, whichever replica was first
    (bucket,) = {when for _, when in cluster.taken}
    assert sent[0]["queue"] == "q"
    assert sent[0]["headers"]["zksched_fire_key"] == f"hb@{bucket:%Y-%m-%dT%H:%M:%SZ}"
    assert sent[0]["headers"]["zksched_fencing_token"] == 1
    assert "headers" not in replicas[0].schedule["hb"].options  # the entry is left as it was
    assert cluster.finished == [(f"hb@{bucket:%Y-%m-%dT%H:%M:%SZ}", "ok")]
    # both replicas' bookkeeping advanced, to the bucket: neither re-sends it on its next tick
    assert [e.last_run_at for e in advanced] == [bucket, bucket]
    assert all(e.total_run_count == 1 for e in advanced)


def test_a_due_interval_entry_is_checked_again_at_the_next_bucket(app: Celery) -> None:
    scheduler = replica(app, FakeCluster(), [])
    entry = scheduler.schedule["hb"]
    entry.last_run_at = datetime.now(UTC) - timedelta(seconds=60)
    due, next_check = scheduler.is_due(entry)
    assert due and 0 < next_check <= 5
    expected = 5 - datetime.now(UTC).timestamp() % 5
    assert abs(next_check - expected) < 0.5


def test_without_zookeeper_nothing_is_sent_and_it_is_logged_once(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = FakeCluster()
    cluster.connected = False
    sent: list[dict[str, Any]] = []
    scheduler = replica(app, cluster, sent)
    for _ in range(3):
        scheduler.apply_entry(scheduler.schedule["hb"])
    assert sent == [] and cluster.taken == set()
    assert len([r for r in caplog.records if "not connected" in r.getMessage()]) == 1


def test_beat_s_own_shutdown_stops_the_cluster(app: Celery) -> None:
    """Beat's SIGTERM and SIGINT handler syncs the schedule, which closes the scheduler: the
    Cluster stops there, so the other replicas take over at once."""
    from celery.beat import Service

    cluster = FakeCluster()
    scheduler = replica(app, cluster, [])
    service = Service(app)
    service.__dict__["scheduler"] = scheduler  # beat's cached scheduler
    service.sync()
    assert cluster.stopped and scheduler.cluster is None
