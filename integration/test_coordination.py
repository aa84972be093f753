"""The coordination API's claims and app locks against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from integration.harness import wait_until
from tools.faultproxy import BLACKHOLE, DROP_REPLIES, PASS, RESET, FaultProxy
from zksched.app.coordination import AppClaim, Coordinator
from zksched.zk.applocks import LockNotAcquired
from zksched.zk.claims import FireClaims
from zksched.zk.paths import ClusterPaths

SESSION = 4.0
REPO = Path(__file__).resolve().parents[1]
BERLIN = timezone(timedelta(hours=1))


def expire(client: KazooClient, zk: str) -> None:
    """End the client's session on the server: take it over, then close it."""
    session_id, password = client.client_id
    thief = KazooClient(hosts=zk, client_id=(session_id, password), timeout=SESSION)
    thief.start(timeout=10)
    thief.stop()
    thief.close()


def test_eight_clients_claim_one_instant_and_exactly_one_wins(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str, kazoo: KazooClient
) -> None:
    paths = ClusterPaths(client_id)
    coordinators = [
        Coordinator(zk_client(zk, SESSION), paths, f"m-{i}", call_timeout=3.0) for i in range(8)
    ]
    # the same instant as each member's timer sees it: another zone, another millisecond
    instants = [datetime(2026, 1, 2, 3, 0, 0, 1000 * i, tzinfo=BERLIN) for i in range(8)]
    barrier = threading.Barrier(8)
    won: list[AppClaim | None] = [None] * 8

    def claim(i: int) -> None:
        barrier.wait()
        won[i] = coordinators[i].claim("report", instants[i])

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [c for c in won if c is not None]
    assert len(winners) == 1
    claim = winners[0]
    assert claim.key == "report@2026-01-02T02:00:00Z"
    assert claim.scheduled == datetime(2026, 1, 2, 2, 0, 0, tzinfo=UTC)
    _, stat = kazoo.get(paths.fire("report", "2026-01-02T02:00:00Z"))
    assert claim.fencing_token == stat.czxid
    record = FireClaims(kazoo, paths, 3.0).read("report", "2026-01-02T02:00:00Z")
    assert record is not None and record.state == "running"
    assert record.member_id == claim.member_id and record.kind == "scheduled"
    # a later claim (of the same or any name) gets a larger token
    later = coordinators[0].claim("report", datetime(2026, 1, 2, 2, 0, 1, tzinfo=UTC))
    assert later is not None and later.fencing_token > claim.fencing_token
    assert coordinators[1].claim("report", instants[1]) is None  # taken stays taken


def test_finish_writes_the_result_as_the_daemon_does(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str, kazoo: KazooClient
) -> None:
    paths = ClusterPaths(client_id)
    coordinator = Coordinator(zk_client(zk, SESSION), paths, "m-1")
    claim = coordinator.claim("sync", datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    assert claim is not None
    assert coordinator.finish(claim, "failed", error="ValueError: boom")
    record = FireClaims(kazoo, paths, 3.0).read("sync", "2026-03-01T12:00:00Z")
    assert record is not None
    assert record.state == "failed" and record.error == "ValueError: boom"
    assert record.fencing_token == claim.fencing_token and record.member_id == "m-1"
    assert record.started_at and record.finished_at and record.finished_at >= record.started_at
    ok = coordinator.claim("sync", datetime(2026, 3, 1, 12, 1, tzinfo=UTC))
    assert ok is not None and coordinator.finish(ok, "ok")
    done = FireClaims(kazoo, paths, 3.0).read("sync", "2026-03-01T12:01:00Z")
    assert done is not None and done.state == "ok" and done.error is None
    with pytest.raises(ValueError, match="status"):
        coordinator.finish(ok, "skipped")  # type: ignore[arg-type]


def lose_the_claims_reply(
    monkeypatch: pytest.MonkeyPatch,
    client: KazooClient,
    proxy: FaultProxy,
    observer: KazooClient,
    path: str,
    then: str | None,
) -> None:
    """The client's next transaction (the claim) lands, but its reply is lost; once the
    record exists the proxy goes to mode `then` (None: it stays, no reply ever comes)."""
    real = client.transaction

    def transaction() -> Any:
        proxy.set_mode(DROP_REPLIES)
        monkeypatch.setattr(client, "transaction", real)

        def after() -> None:
            wait_until(lambda: observer.exists(path), 10, what="the claim to land")
            assert then is not None
            proxy.set_mode(then)

        if then is not None:
            threading.Thread(target=after, daemon=True).start()
        return real()

    monkeypatch.setattr(client, "transaction", transaction)


def test_a_claim_whose_reply_was_lost_has_exactly_one_winner(
    zk_client: Callable[..., KazooClient],
    zk: str,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
    kazoo: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = ClusterPaths(client_id)
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    mine = Coordinator(client, paths, "m-1", call_timeout=2.0)
    rival = Coordinator(zk_client(zk, SESSION), paths, "m-2")
    when = datetime(2026, 4, 1, tzinfo=UTC)
    path = paths.fire("job", "2026-04-01T00:00:00Z")
    lose_the_claims_reply(monkeypatch, client, proxy, kazoo, path, then=PASS)

    claim = mine.claim("job", when)
    assert claim is not None  # resolved by its nonce: ours
    assert rival.claim("job", when) is None
    assert kazoo.get_children(paths.job_fires("job")) == ["2026-04-01T00:00:00Z"]
    _, stat = kazoo.get(path)
    assert claim.fencing_token == stat.czxid


def test_an_undecided_claim_returns_none_and_is_settled_as_skipped(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
    kazoo: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = ClusterPaths(client_id)
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    mine = Coordinator(client, paths, "m-1", call_timeout=0.5)
    path = paths.fire("job", "2026-04-01T00:00:00Z")
    lose_the_claims_reply(monkeypatch, client, proxy, kazoo, path, then=None)

    assert mine.claim("job", datetime(2026, 4, 1, tzinfo=UTC)) is None
    assert mine.pending == 1
    wait_until(lambda: kazoo.exists(path), 5, what="the claim to have landed")
    proxy.set_mode(PASS)
    wait_until(lambda: mine.pending == 0, 15, what="the claim settled")
    record = FireClaims(kazoo, paths, 3.0).read("job", "2026-04-01T00:00:00Z")
    assert record is not None and record.state == "skipped"
    assert record.skip_reason == "claim-error" and record.member_id == "m-1"


def test_a_names_fire_folder_stays_bounded(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str, kazoo: KazooClient
) -> None:
    paths = ClusterPaths(client_id)
    coordinator = Coordinator(zk_client(zk, SESSION), paths, "m-1", history=3)
    claims = FireClaims(kazoo, paths, 3.0)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(14):
        assert coordinator.claim("tick", start + timedelta(seconds=n)) is not None
        assert len(claims.instants("tick")) <= 3 + 5
    kept = claims.instants("tick")
    assert kept[-1] == "2026-01-01T00:00:13Z" and len(kept) < 14
    horizon = claims.pruned_through("tick")
    assert horizon is not None
    # a pruned instant is never claimed again (it may have run)
    assert coordinator.claim("tick", start) is None


# -- app locks ----------------------------------------------------------------------------


def test_lock_non_blocking_blocking_and_contention(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str, kazoo: KazooClient
) -> None:
    paths = ClusterPaths(client_id)
    a = Coordinator(zk_client(zk, SESSION), paths, "m-a").lock("nightly")
    b = Coordinator(zk_client(zk, SESSION), paths, "m-b").lock("nightly")
    folder = paths.app_lock("nightly")
    assert a.acquire()
    kazoo.create(f"{folder}/junk", b"\xff")  # not a contender: blocks nobody
    with pytest.raises(RuntimeError, match="held by this handle already"):
        a.acquire()
    assert not b.acquire()
    assert not b.acquire(blocking=True, timeout=0.3)
    with pytest.raises(LockNotAcquired, match="nightly"), b.hold():
        pass
    # failed attempts leave no contender behind
    assert [c for c in kazoo.get_children(folder) if c != "junk"] == [a._node.rsplit("/")[-1]]  # type: ignore[union-attr]

    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(b.acquire(blocking=True, timeout=20)))
    waiter.start()
    time.sleep(0.3)  # let it queue behind a (the test is of the hand-over, not of speed)
    assert not got
    a.release()
    waiter.join(20)
    assert got == [True] and b.held and not a.held
    b.release()
    with a.hold(blocking=True, timeout=5) as held:
        assert held.held and not held.lost
    assert [c for c in kazoo.get_children(folder) if c != "junk"] == []
    # app locks never touch job run locks
    assert not kazoo.exists(paths.job_lock("nightly"))


def test_lock_lost_on_session_expiry(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    paths = ClusterPaths(client_id)
    client = zk_client(zk, SESSION)
    reasons: list[str] = []
    lock = Coordinator(client, paths, "m-a").lock("nightly", on_lost=reasons.append)
    other = Coordinator(zk_client(zk, SESSION), paths, "m-b").lock("nightly")
    assert lock.acquire()
    expire(client, zk)
    wait_until(lambda: lock.lost and reasons, 15, what="the loss noticed")
    assert reasons == ["session-lost"] and lock.lost_reason == "session-lost"
    assert other.acquire(blocking=True, timeout=10)  # it is free: the node went
    wait_until(lambda: client.state == KazooState.CONNECTED, 15, what="a new session")
    lock.release()  # deletes nothing of the new holder's
    assert other.held and not other.lost
    assert not lock.acquire()  # the same handle tries again: held elsewhere


def test_lock_node_deleted_under_its_holder(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str, kazoo: KazooClient
) -> None:
    paths = ClusterPaths(client_id)
    reasons: list[str] = []
    lock = Coordinator(zk_client(zk, SESSION), paths, "m-a").lock("db", on_lost=reasons.append)
    assert lock.acquire()
    (node,) = kazoo.get_children(paths.app_lock("db"))
    kazoo.delete(f"{paths.app_lock('db')}/{node}")
    wait_until(lambda: lock.lost and reasons, 10, what="the loss noticed")
    assert reasons == ["node-deleted"]
    lock.release()
    assert lock.acquire() and not lock.lost  # a fresh hold
    lock.release()


def test_a_silent_connection_loses_the_lock_before_the_session_can_expire(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    reasons: list[str] = []
    lock = Coordinator(client, ClusterPaths(client_id), "m-a").lock("x", on_lost=reasons.append)
    assert lock.acquire()
    cut = time.monotonic()
    proxy.set_mode(BLACKHOLE)
    # kazoo says SUSPENDED two thirds of a session into the silence: the hold is over by
    # then (half a session of silence), before the server can expire the session
    wait_until(lambda: lock.lost and reasons, SESSION + 2, what="declared lost")
    assert time.monotonic() - cut < SESSION
    assert reasons == ["suspended"]
    proxy.set_mode(PASS)  # the session survived: release deletes the node it still has
    wait_until(lambda: client.state == KazooState.CONNECTED, 15, what="reconnected")
    lock.release()
    assert not lock.held
    assert lock.acquire() and not lock.lost
    lock.release()


def test_a_short_cut_keeps_the_lock(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    lock = Coordinator(client, ClusterPaths(client_id), "m-a").lock("x")
    assert lock.acquire()
    # held quietly past half a session: no request since, only kazoo's pings answered
    time.sleep(SESSION * 0.75)
    proxy.set_mode(RESET)  # the connection drops at once: SUSPENDED right after a ping
    wait_until(lambda: lock.suspended, 5, what="suspended")
    proxy.set_mode(PASS)  # back well within half a session of silence
    wait_until(lambda: client.state == KazooState.CONNECTED, 10, what="reconnected")
    time.sleep(SESSION / 2)  # past the margin: a timer still running would fire now
    assert lock.held and not lock.lost and not lock.suspended
    lock.release()


def test_a_lock_attempt_whose_create_reply_was_lost_leaves_no_orphan(
    zk_client: Callable[..., KazooClient],
    zk: str,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
    kazoo: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kazoo #732: a contender created by a failed attempt would block the lock for as
    long as our session lives; it is found by its prefix and deleted once ZooKeeper
    answers again."""
    paths = ClusterPaths(client_id)
    folder = paths.app_lock("db")
    kazoo.ensure_path(folder)
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    real_create = client.create_async
    dropped: list[str] = []

    def create_losing_the_reply(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.startswith(folder + "/") and not dropped:
            dropped.append(path)
            proxy.set_mode(DROP_REPLIES)
        return real_create(path, *args, **kwargs)

    monkeypatch.setattr(client, "create_async", create_losing_the_reply)
    lock = Coordinator(client, paths, "m-a", call_timeout=1.0).lock("db")
    assert not lock.acquire()
    wait_until(lambda: kazoo.get_children(folder), 5, what="the contender to land")
    proxy.set_mode(PASS)
    wait_until(lambda: not kazoo.get_children(folder), 15, what="the orphan deleted")
    assert client.client_id is not None  # the same session lives on: it was not expiry
    other = Coordinator(zk_client(zk, SESSION), paths, "m-b").lock("db")
    assert other.acquire()
    other.release()


def test_jobs_history_reads_an_app_claim_like_a_daemon_fire(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zksched", "--zk", zk, "--client-id", client_id, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text('[jobs.report]\nschedule = "0 2 * * *"\ncommand = ["true"]\n')
    assert cli("jobs", "apply", str(jobfile)).returncode == 0
    coordinator = Coordinator(zk_client(zk, SESSION), ClusterPaths(client_id), "m-1")
    claim = coordinator.claim("report", datetime(2026, 1, 2, 2, 0, tzinfo=UTC))
    assert claim is not None and coordinator.finish(claim, "ok")
    shown = cli("jobs", "history", "report", "--json")
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)
    assert row["fire_key"] == claim.key and row["state"] == "ok"
    assert row["fencing_token"] == claim.fencing_token and row["member_id"] == "m-1"
