"""Claims drafted ahead of their instant (FirePath.draft): sent when due, and only while
what they were made from still holds. Against a real ZooKeeper, in one process."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from integration.fires import FireLog, recording_job
from integration.harness import member_with_jobs, wait_until
from zksched.core.firekey import format_utc
from zksched.core.fires import FireRecord
from zksched.runtime.daemon import Daemon
from zksched.runtime.firing import ClaimDrafts

JOBS = ("d-0", "d-1", "d-2")


@pytest.fixture
def daemon(zk: str, client_id: str, tmp_path: Path) -> Iterator[Daemon]:
    # yearly jobs: the timer leaves them alone while the test fires them by hand
    text = "".join(
        recording_job(name, tmp_path / "fires.log", schedule="0 0 1 1 *", overlap="allow")
        for name in JOBS
    )
    member = member_with_jobs(zk, client_id, tmp_path, text)
    try:
        wait_until(lambda: member.scheduler.owned_jobs() == list(JOBS), 15, what="owning")
        yield member
    finally:
        member.stop()


def stored(daemon: Daemon, job: str, instant: datetime) -> FireRecord:
    raw, _ = daemon.client.get(daemon.paths.fire(job, format_utc(instant)))
    return FireRecord.from_json(raw)


def test_drafted_claims_are_sent_when_due_and_claimed_then(daemon: Daemon, tmp_path: Path) -> None:
    specs = {name: daemon.jobs.snapshot.entries[name].spec for name in JOBS}
    instant = datetime(2030, 1, 1, tzinfo=UTC)  # any instant of the schedule will do
    due = [(spec, instant, instant.timestamp()) for spec in specs.values() if spec is not None]
    drafts = daemon.fire_path.draft(due)
    assert sorted(name for name, _ in drafts.by_fire) == list(JOBS)
    time.sleep(0.05)
    sent = time.time()
    # d-2 was paused since its claim was drafted: its draft must not be sent
    paused = dataclasses.replace(due[2][0], paused=True)
    assert daemon.fire_path.fire_many([*due[:2], (paused, instant, due[2][2])], drafts) == []
    assert daemon.fire_path.stats.claims_drafted == 2

    log = FireLog(tmp_path / "fires.log")
    wait_until(lambda: len(log.fire_keys()) == 2, 10, what="the two runs")
    assert sorted(log.fire_keys()) == [f"d-0@{format_utc(instant)}", f"d-1@{format_utc(instant)}"]
    assert daemon.skips.by_job[("d-2", "paused")] == 1
    for name in ("d-0", "d-1"):
        record = stored(daemon, name, instant)
        assert record.nonce == drafts.by_fire[(name, instant)][1].record.nonce, "the draft"
        # claimed when sent, not when drafted
        claimed = datetime.fromisoformat(record.claimed_at.replace("Z", "+00:00"))
        assert claimed.timestamp() >= sent - 0.002


def test_drafts_made_with_another_cluster_view_are_not_sent(daemon: Daemon, tmp_path: Path) -> None:
    specs = [daemon.jobs.snapshot.entries[name].spec for name in JOBS[:2]]
    instant = datetime(2031, 1, 1, tzinfo=UTC)
    due = [(spec, instant, instant.timestamp()) for spec in specs if spec is not None]
    made = daemon.fire_path.draft(due)
    # the membership changed meanwhile (a new view object, even if equal)
    stale = ClaimDrafts(dataclasses.replace(made.view), made.by_fire)
    assert daemon.fire_path.fire_many(due, stale) == []
    assert daemon.fire_path.stats.claims_drafted == 0
    log = FireLog(tmp_path / "fires.log")
    wait_until(lambda: len(log.fire_keys()) == 2, 10, what="the two runs")
    for name in JOBS[:2]:
        assert stored(daemon, name, instant).nonce != made.by_fire[(name, instant)][1].record.nonce


def test_the_timer_has_claims_due_together_drafted(zk: str, client_id: str, tmp_path: Path) -> None:
    out = tmp_path / "fires.log"
    text = "".join(recording_job(f"tick-{i}", out, overlap="allow") for i in range(4))
    member = member_with_jobs(zk, client_id, tmp_path, text)
    try:
        log = FireLog(out)
        log.wait_for(lambda: len(log.fire_keys()) >= 16, 20)
    finally:
        member.stop()
    # every second's four claims but (maybe) those of the first seconds, during catch-up
    assert member.fire_path.stats.claims_drafted >= 8
    assert log.duplicates() == {}
    assert log.started_early() == []
