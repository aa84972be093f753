"""Result writes batched in one transaction (zksched/runtime/fire/results.py), against a real
server: written together, redone one by one when a record vanished, kept for a retry when
ZooKeeper does not answer."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tools.faultproxy import BLACKHOLE, FaultProxy
from zksched.core.firerecord import FireRecord
from zksched.runtime.fire.results import ResultWriter
from zksched.runtime.fire.tuning import MAX_HOLD
from zksched.runtime.fire.tuning import RESULT_BATCH as BATCH
from zksched.zk.claims import Claimed, FireClaims
from zksched.zk.paths import ClusterPaths


def claimed_records(claims: FireClaims, count: int, job: str) -> list[Claimed]:
    out = []
    for i in range(count):
        record = FireRecord(
            job=job,
            scheduled=f"2026-01-01T00:00:{i:02d}Z",
            member_id="m-1",
            session=1,
            nonce=f"n{i}",
            state="running",
            claimed_at="2026-01-01T00:00:00.000Z",
        )
        outcome = claims.claim(record)
        assert isinstance(outcome, Claimed)
        out.append(outcome)
    return out


def queue_behind_a_first_result(writer: ResultWriter, batch: list[Claimed], state: str) -> None:
    """Submit batch[0] alone, and the rest while the writer is still busy with it: the rest
    is then written as one batch."""
    busy, go, done = threading.Event(), threading.Event(), threading.Semaphore(0)
    writer.submit(batch[0], replace(batch[0].record, state=state), lambda: (busy.set(), go.wait()))
    assert busy.wait(10)
    for claimed in batch[1:]:
        writer.submit(claimed, replace(claimed.record, state=state), done.release)
    go.set()
    for _ in batch[1:]:
        assert done.acquire(timeout=10)
    assert writer.drain(5)


def test_results_ready_together_are_written_in_one_transaction(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    claims = FireClaims(zk_client(zk, session_timeout=4.0), ClusterPaths(client_id), 3.0)
    alone: list[str] = []

    def write_one(claimed: Claimed, record: FireRecord) -> None:
        alone.append(record.scheduled)
        with contextlib.suppress(NoNodeError):
            claims.complete(claimed, record)

    writer = ResultWriter(claims, write_one, lambda c, r: None)
    batch = claimed_records(claims, 5, "j")
    queue_behind_a_first_result(writer, batch, "ok")
    for claimed in batch:
        assert FireRecord.from_json(kazoo.get(claimed.path)[0]).state == "ok"
    assert alone == [batch[0].record.scheduled]  # the four behind it went together

    # a record deleted meanwhile (`jobs delete`): the transaction does not apply, so each
    # result is written on its own; the others are still recorded
    alone.clear()
    second = claimed_records(claims, 4, "k")
    kazoo.delete(second[2].path)
    queue_behind_a_first_result(writer, second, "failed")
    assert sorted(alone) == sorted(c.record.scheduled for c in second)
    for claimed in second:
        if claimed is not second[2]:
            assert FireRecord.from_json(kazoo.get(claimed.path)[0]).state == "failed"
    assert not kazoo.exists(second[2].path)  # a result write never re-creates a record


def test_results_that_cannot_be_written_are_kept_for_a_retry(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[[str | None], FaultProxy],
    zk: str,
    client_id: str,
) -> None:
    proxy = proxy_to(None)
    claims = FireClaims(
        zk_client(proxy.address, session_timeout=10.0), ClusterPaths(client_id), 0.5
    )
    batch = claimed_records(claims, 3, "j")
    kept: list[str] = []
    writer = ResultWriter(claims, lambda c, r: None, lambda c, r: kept.append(r.scheduled))
    busy, go = threading.Event(), threading.Event()
    writer.submit(batch[0], replace(batch[0].record, state="ok"), lambda: (busy.set(), go.wait()))
    assert busy.wait(10)
    for claimed in batch[1:]:
        writer.submit(claimed, replace(claimed.record, state="ok"), lambda: None)
    proxy.set_mode(BLACKHOLE)
    go.set()
    assert writer.drain(10)
    assert sorted(kept) == [c.record.scheduled for c in batch[1:]]


def test_results_wait_while_fires_start_then_go_together(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    """While `hold()` says fires are being started, results stay queued (a burst's starts
    come first); then they are written in one transaction and each fire is reported."""
    claims = FireClaims(zk_client(zk, session_timeout=4.0), ClusterPaths(client_id), 3.0)
    starting = threading.Event()
    starting.set()
    alone: list[str] = []

    def write_one(claimed: Claimed, record: FireRecord) -> None:
        alone.append(record.scheduled)
        claims.complete(claimed, record)

    writer = ResultWriter(claims, write_one, lambda c, r: None, hold=starting.is_set)
    batch = claimed_records(claims, 3, "j")
    reported = threading.Semaphore(0)
    for claimed in batch:
        writer.submit(claimed, replace(claimed.record, state="ok"), reported.release)
    time.sleep(0.3)  # < MAX_HOLD: still held back
    assert all(FireRecord.from_json(kazoo.get(c.path)[0]).state == "running" for c in batch), (
        "results were written while fires were being started"
    )
    starting.clear()
    for _ in batch:
        assert reported.acquire(timeout=10)
    assert writer.drain(5)
    assert alone == []  # one transaction, none on its own
    assert all(FireRecord.from_json(kazoo.get(c.path)[0]).state == "ok" for c in batch)

    # a hold that never ends delays results by MAX_HOLD at most
    starting.set()
    late = claimed_records(claims, 1, "k")[0]
    t0 = time.monotonic()
    writer.submit(late, replace(late.record, state="ok"), reported.release)
    assert reported.acquire(timeout=10)
    assert MAX_HOLD * 0.9 <= time.monotonic() - t0 < MAX_HOLD + 5
    assert FireRecord.from_json(kazoo.get(late.path)[0]).state == "ok"


def test_a_hold_that_never_ends_delays_no_result_by_more_than_max_hold(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    # Fires due together every second keep the hold on for good: a backlog of more than
    # one transaction's worth must still go within MAX_HOLD of each result's submission,
    # not MAX_HOLD per transaction (which would fall behind a member's steady load).
    claims = FireClaims(zk_client(zk, session_timeout=4.0), ClusterPaths(client_id), 3.0)
    writer = ResultWriter(claims, claims.complete, lambda c, r: None, hold=lambda: True)
    jobs = -(-(2 * BATCH + 50) // 60)  # claimed_records makes at most 60 per job
    backlog = [c for j in range(jobs) for c in claimed_records(claims, 60, f"h-{j}")]
    assert len(backlog) > 2 * BATCH
    reported = threading.Semaphore(0)
    t0 = time.monotonic()
    for claimed in backlog:
        writer.submit(claimed, replace(claimed.record, state="ok"), reported.release)
    for _ in backlog:
        assert reported.acquire(timeout=3 * MAX_HOLD + 10)
    # one hold for the whole backlog (three transactions would have waited 3 x MAX_HOLD)
    assert time.monotonic() - t0 < 2 * MAX_HOLD
    assert all(FireRecord.from_json(kazoo.get(c.path)[0]).state == "ok" for c in backlog)


def test_a_result_whose_lock_another_member_waits_for_does_not_wait(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    # The job moved: its new owner skips `still-running` while the lock is held and the
    # record says `running`, so this result (and those queued before it) goes at once.
    claims = FireClaims(zk_client(zk, session_timeout=4.0), ClusterPaths(client_id), 3.0)
    writer = ResultWriter(claims, claims.complete, lambda c, r: None, hold=lambda: True)
    before, moved = claimed_records(claims, 2, "u")
    reported = threading.Semaphore(0)
    t0 = time.monotonic()
    writer.submit(before, replace(before.record, state="ok"), reported.release)
    writer.submit(moved, replace(moved.record, state="ok"), reported.release, urgent=True)
    for _ in range(2):
        assert reported.acquire(timeout=MAX_HOLD + 10)
    assert time.monotonic() - t0 < MAX_HOLD - 1.0, "it waited for the hold"
    assert FireRecord.from_json(kazoo.get(moved.path)[0]).state == "ok"
