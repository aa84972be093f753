"""The coordination API of zksched.Cluster against a real ZooKeeper: claims, locks and the
leader, through the public class (the ZooKeeper-layer pieces have their own tests in
test_coordination.py and test_election.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from integration.harness import wait_until
from zksched import Cluster, LockNotAcquired
from zksched.zk.claims import FireClaims
from zksched.zk.connection import ZkSettings, close_quietly, make_client
from zksched.zk.paths import ClusterPaths

ROOT = Path(__file__).resolve().parent.parent
SESSION = 4.0


@pytest.fixture
def members(zk: str, client_id: str) -> Iterator[list[Cluster]]:
    started = [Cluster(zk, client_id, member_id=f"m{i}", session_timeout=SESSION) for i in range(4)]
    for cluster in started:
        cluster.start()
    yield started
    for cluster in started:
        cluster.stop()


def test_one_claim_per_instant_across_members_and_its_result(
    members: list[Cluster], zk: str, client_id: str
) -> None:
    instant = datetime(2026, 12, 3, 12, 0, 0, 250_000, tzinfo=UTC)
    with ThreadPoolExecutor(len(members)) as pool:
        got = list(pool.map(lambda c: c.claim("nightly-report", instant), members))
    winners = [claim for claim in got if claim is not None]
    assert len(winners) == 1
    claim = winners[0]
    assert claim.key == "nightly-report@2026-12-03T12:00:00Z" and claim.fencing_token > 0
    winner = members[got.index(claim)]
    assert winner.finish(claim, "failed", "RuntimeError: printer on fire")
    client = make_client(ZkSettings(hosts=zk))
    client.start(10)
    try:
        record = FireClaims(client, ClusterPaths(client_id), 5).read(
            "nightly-report", "2026-12-03T12:00:00Z"
        )
    finally:
        close_quietly(client)
    assert record is not None and record.state == "failed"
    assert record.member_id == winner.member_id and record.error == "RuntimeError: printer on fire"


def test_a_lock_is_held_by_one_member_at_a_time(members: list[Cluster]) -> None:
    first, second = members[:2]
    with first.lock("migrations") as held:
        assert held.held
        with pytest.raises(LockNotAcquired), second.lock("migrations"):
            pass
    with second.lock("migrations", blocking=True, timeout=10) as held:
        assert held.held and not held.lost


def test_a_persistent_node_in_a_lock_folder_blocks_no_one(
    members: list[Cluster], kazoo: KazooClient, client_id: str
) -> None:
    """A persistent node named like a contender, sorting first, held the lock for ever (it
    never goes with a session). Every contender is ephemeral: such a node is deleted."""
    path = ClusterPaths(client_id).app_lock("migrations")
    kazoo.create(f"{path}/00000000-0000__lock__0000000000", b"evil", makepath=True)
    kazoo.create(f"{path}/00000000-0000__lock__0000000000/child", b"")
    kazoo.create(f"{path}/junk", b"")  # another stranger, not a contender
    with pytest.raises(LockNotAcquired), members[0].lock("migrations"):
        pass  # the first attempt meets it, and deletes it on the way out
    with members[0].lock("migrations") as held:
        assert held.held


def test_one_leader_whose_stop_hands_over_with_a_larger_token(members: list[Cluster]) -> None:
    wait_until(lambda: sum(c.is_leader() for c in members) == 1, 20, what="one leader")
    leader = next(c for c in members if c.is_leader())
    with leader.leader(timeout=1) as term:
        assert term.token == leader.leader_term() and not term.lost.is_set()
        leader.stop()
        assert term.lost.wait(5), "the term did not end with the stop"
    rest = [c for c in members if c is not leader]
    wait_until(lambda: sum(c.is_leader() for c in rest) == 1, 5, what="the next leader")
    successor = next(c for c in rest if c.is_leader())
    assert (successor.leader_term() or 0) > term.token


def test_a_sigkilled_leader_is_replaced_within_the_session_timeout_plus_a_second(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    log = tmp_path / "leaders.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SESSION": str(SESSION)}

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "integration.apps.leader_app", zk, client_id, str(log)],
            cwd=ROOT,
            env=env,
        )

    def terms() -> list[tuple[int, int, float]]:
        lines = log.read_text().split("\n") if log.exists() else []
        return [
            (int(pid), int(token), float(at))
            for pid, what, token, at in (line.split() for line in lines if line)
            if what == "lead"
        ]

    apps = {p.pid: p for p in (start() for _ in range(3))}
    try:
        kills: list[tuple[float, int]] = []
        for round_ in range(3):  # three leaders SIGKILLed, one after the other
            wait_until(lambda r=round_: len(terms()) > r, 30, what="a leader")
            pid, token, _ = terms()[-1]
            killed_at = time.time()
            apps.pop(pid).send_signal(signal.SIGKILL)
            kills.append((killed_at, token))
            new = start()
            apps[new.pid] = new
        wait_until(lambda: len(terms()) > len(kills), 30, what="the last leader")
    finally:
        for app in apps.values():
            app.send_signal(signal.SIGTERM)
        for app in apps.values():
            app.wait(20)
    led = terms()
    tokens = [token for _, token, _ in led]
    assert tokens == sorted(set(tokens)), "terms' tokens must strictly increase"
    for killed_at, token in kills:
        successor = next(t for t in led if t[1] > token)
        took = successor[2] - killed_at
        print(f"SIGKILLed leader (token {token}) replaced after {took:.2f}s")
        assert took <= SESSION + 1.0, f"a new leader after {took:.2f}s"


def test_claims_keep_as_much_history_as_the_job_of_that_name_asks_for(
    zk: str, client_id: str
) -> None:
    app = Cluster(zk, client_id, member_id="keeper", session_timeout=SESSION)
    app.add_job(lambda fire: None, "@yearly", name="reindex", history=60)
    app.start()
    try:
        base = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
        for i in range(80):
            claim = app.claim("reindex", datetime.fromtimestamp(base + 60 * i, UTC))
            assert claim is not None
            app.finish(claim)
        client = make_client(ZkSettings(hosts=zk))
        client.start(10)
        try:
            kept = FireClaims(client, ClusterPaths(client_id), 5).instants("reindex")
        finally:
            close_quietly(client)
    finally:
        app.stop()
    assert 60 <= len(kept) < 80  # pruned to the job's history (60), not the default 20


def test_a_leader_cut_off_stops_leading_even_while_kazoo_believes_it_is_connected(
    zk: str, client_id: str, proxy_to: Callable[..., object]
) -> None:
    """Steady requests keep kazoo from pinging, so it may not notice a silent connection for
    a long time; the member's contact watchdog does and gives the connection up (kazoo then
    suspends), and leadership ends with it, within the session timeout."""
    import threading

    from tools.faultproxy import BLACKHOLE, PASS, FaultProxy

    proxy = proxy_to()
    assert isinstance(proxy, FaultProxy)
    heard: list[tuple[bool, int | None]] = []
    app = Cluster(proxy.address, client_id, member_id="lonely", session_timeout=SESSION)
    app.on_leader_change(lambda leading, token: heard.append((leading, token)))
    app.start()
    stop = threading.Event()
    try:
        wait_until(app.is_leader, 20, what="the only candidate leads")
        client = app._require_daemon().client

        def chatter() -> None:
            while not stop.wait(0.05):
                if client.connected:
                    client.exists_async("/")

        threading.Thread(target=chatter, daemon=True).start()
        proxy.set_mode(BLACKHOLE)
        cut = time.monotonic()
        wait_until(lambda: not app.is_leader(), SESSION, what="leadership ends with contact")
        assert time.monotonic() - cut < SESSION
        wait_until(lambda: heard[-1] == (False, None), 5, what="the listener told")
        proxy.set_mode(PASS)
        wait_until(app.is_leader, 30, what="leading again once back")
    finally:
        stop.set()
        proxy.set_mode(PASS)
        app.stop()
