"""The leader election against a real server: hand-over, a killed leader, SUSPENDED, ghosts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from integration.harness import wait_until
from tools.faultproxy import BLACKHOLE, DROP_REPLIES, PASS, FaultProxy
from zksched.zk.election import LeaderElection
from zksched.zk.paths import ClusterPaths

REPO = Path(__file__).resolve().parents[1]
SESSION = 4.0


class Watcher:
    """Records what one election's listener heard, and checks one leader at a time."""

    def __init__(self, election: LeaderElection, board: Board) -> None:
        self.heard: list[tuple[bool, int | None]] = []
        self._board = board
        self._election = election
        election.add_listener(self._hear)

    def _hear(self, leading: bool, token: int | None) -> None:
        self.heard.append((leading, token))
        self._board.change(self._election, leading, token)


class Board:
    """Who leads among the in-process candidates; overlaps are errors."""

    def __init__(self) -> None:
        self.leaders: set[int] = set()
        self.tokens: list[int] = []
        self.overlaps = 0
        self._mutex = threading.Lock()

    def change(self, election: LeaderElection, leading: bool, token: int | None) -> None:
        with self._mutex:
            if leading:
                if self.leaders - {id(election)}:
                    self.overlaps += 1
                self.leaders.add(id(election))
                if token is not None and (not self.tokens or self.tokens[-1] != token):
                    self.tokens.append(token)
            else:
                self.leaders.discard(id(election))


@pytest.fixture
def elections() -> Iterator[list[LeaderElection]]:
    made: list[LeaderElection] = []
    yield made
    for election in made:
        election.stop()


def candidate(
    client: KazooClient, client_id: str, member: str, made: list[LeaderElection]
) -> LeaderElection:
    election = LeaderElection(client, ClusterPaths(client_id), member, call_timeout=2.0)
    made.append(election)
    return election


def leaders(group: list[LeaderElection]) -> list[LeaderElection]:
    return [e for e in group if e.is_leader]


def test_three_candidates_stop_the_leader_and_the_next_leads(
    zk_client: Callable[..., KazooClient],
    zk: str,
    client_id: str,
    elections: list[LeaderElection],
) -> None:
    board = Board()
    group = [candidate(zk_client(zk, SESSION), client_id, f"m-{i}", elections) for i in range(3)]
    watchers = [Watcher(e, board) for e in group]
    folder = ClusterPaths(client_id).leader
    observer = zk_client(zk)
    for n, election in enumerate(group, start=1):
        election.start()
        election.start()  # idempotent
        # one after the other, for a known succession
        wait_until(
            lambda n=n: observer.exists(folder) and len(observer.get_children(folder)) == n,
            10,
            what=f"candidate {n}",
        )
    assert group[0].wait_for_leadership(10)
    first = group[0].term
    assert first is not None and leaders(group) == [group[0]]
    assert group[1].leader_id() == "m-0"

    group[0].stop()
    assert group[1].wait_for_leadership(10)
    assert leaders(group) == [group[1]]
    second = group[1].term
    assert second is not None and second > first
    assert watchers[0].heard[-1] == (False, None)

    group[1].stop()
    assert group[2].wait_for_leadership(10)
    third = group[2].term
    assert third is not None and third > second
    assert board.overlaps == 0 and board.tokens == [first, second, third]
    assert group[2].leader_id() == "m-2"


CHILD = """
import sys, time
from kazoo.client import KazooClient
from zksched.zk.election import LeaderElection
from zksched.zk.paths import ClusterPaths

client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
client.start(timeout=10)
election = LeaderElection(client, ClusterPaths(sys.argv[2]), "child", 2.0)
election.start()
if election.wait_for_leadership(20):
    print("LEADING", election.term, flush=True)
time.sleep(600)
"""


def test_a_killed_leader_is_replaced_within_the_session_timeout(
    zk_client: Callable[..., KazooClient],
    zk: str,
    client_id: str,
    tmp_path: Path,
    elections: list[LeaderElection],
) -> None:
    script = tmp_path / "leader.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(script), zk, client_id, str(SESSION)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().split()  # blocks until it leads (or exits)
        assert line[:1] == ["LEADING"], f"the child did not lead: {line}"
        child_token = int(line[1])
        board = Board()
        group = [candidate(zk_client(zk, SESSION), client_id, f"m-{i}", elections) for i in (1, 2)]
        for election in group:
            Watcher(election, board)
            election.start()
        # both are candidates behind the child
        wait_until(
            lambda: len(zk_client(zk).get_children(ClusterPaths(client_id).leader)) == 3,
            10,
            what="three candidates",
        )
        assert leaders(group) == []

        child.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        winner = wait_until(lambda: leaders(group), SESSION + 5, what="a new leader")
        took = time.monotonic() - killed
        assert took <= SESSION + 1.0, f"took {took:.2f} s"
        assert len(winner) == 1 and board.overlaps == 0
        token = winner[0].term
        assert token is not None and token > child_token
    finally:
        child.kill()
        child.wait()


def test_suspended_leader_stops_leading_at_once_and_leads_again(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
    elections: list[LeaderElection],
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    election = candidate(client, client_id, "m-1", elections)
    heard: list[tuple[bool, int | None]] = []
    election.add_listener(lambda leading, token: heard.append((leading, token)))
    election.start()
    assert election.wait_for_leadership(10)
    token = election.term
    session = client.client_id[0]

    proxy.set_mode(BLACKHOLE)
    wait_until(lambda: client.state != KazooState.CONNECTED, SESSION + 2, what="suspended")
    assert not election.is_leader and election.term is None  # no wait for anyone
    wait_until(lambda: heard[-1] == (False, None), 5, what="the listener told")

    proxy.set_mode(PASS)  # back before the session can expire: the same term goes on
    assert election.wait_for_leadership(10)
    assert client.client_id[0] == session and election.term == token
    assert heard[-1] == (True, token)


def test_a_lost_create_reply_leaves_no_ghost_that_leads_for_ever(
    zk_client: Callable[..., KazooClient],
    zk: str,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
    monkeypatch: pytest.MonkeyPatch,
    elections: list[LeaderElection],
) -> None:
    proxy = proxy_to()
    paths = ClusterPaths(client_id)
    observer = zk_client(zk)
    observer.ensure_path(paths.leader)
    client = zk_client(proxy.address, SESSION)
    real_create = client.create_async
    dropped: list[str] = []

    def create_losing_the_reply(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.startswith(paths.leader + "/") and not dropped:
            dropped.append(path)
            proxy.set_mode(DROP_REPLIES)  # the create lands; its reply never comes
            threading.Thread(target=heal, daemon=True).start()
        return real_create(path, *args, **kwargs)

    def heal() -> None:
        wait_until(lambda: observer.get_children(paths.leader), 10, what="the create to land")
        proxy.set_mode(PASS)

    monkeypatch.setattr(client, "create_async", create_losing_the_reply)
    ghostly = candidate(client, client_id, "a", elections)
    ghostly.start()
    wait_until(lambda: dropped, 10, what="the create sent")
    other = candidate(zk_client(zk, SESSION), client_id, "b", elections)
    other.start()

    # the node that landed is adopted: "a" leads, with one node only
    assert ghostly.wait_for_leadership(15)
    assert not other.is_leader
    # "b" joins on its own thread: wait for its node, then "a" must have exactly one
    wait_until(lambda: len(observer.get_children(paths.leader)) >= 2, 10, what="b's node")
    assert len(observer.get_children(paths.leader)) == 2
    ghostly.stop()
    assert other.wait_for_leadership(10)
    assert len(observer.get_children(paths.leader)) == 1


def test_hostile_entries_in_the_folder_block_nobody(
    zk_client: Callable[..., KazooClient],
    zk: str,
    client_id: str,
    elections: list[LeaderElection],
) -> None:
    paths = ClusterPaths(client_id)
    vandal = zk_client(zk)
    vandal.ensure_path(paths.leader)
    vandal.create(f"{paths.leader}/junk", b"\xff\x00 not json")
    vandal.create(f"{paths.leader}/0__cand__0000000000", b"{}")  # persistent, sorts first
    broken = zk_client(zk, SESSION)  # a live candidate whose data is garbage: just a candidate
    deep = b"[" * 100_000 + b"]" * 100_000  # past the parser's recursion
    broken.create(paths.leader_candidate_prefix("ab"), deep, ephemeral=True, sequence=True)

    election = candidate(zk_client(zk, SESSION), client_id, "m-1", elections)
    election.start()
    time.sleep(1.0)  # it must not lead while the live (if broken) candidate is ahead
    assert not election.is_leader and election.leader_id() is None
    broken.stop()  # that candidate's session ends
    assert election.wait_for_leadership(10)
    assert election.leader_id() == "m-1"


def test_after_session_expiry_it_runs_again_with_a_new_term(
    zk_client: Callable[..., KazooClient],
    zk: str,
    client_id: str,
    elections: list[LeaderElection],
) -> None:
    client = zk_client(zk, SESSION)
    election = candidate(client, client_id, "m-1", elections)
    heard: list[tuple[bool, int | None]] = []
    election.add_listener(lambda leading, token: heard.append((leading, token)))
    election.start()
    assert election.wait_for_leadership(10)
    first = election.term
    session_id, password = client.client_id
    thief = KazooClient(hosts=zk, client_id=(session_id, password), timeout=SESSION)
    thief.start(timeout=10)
    thief.stop()
    thief.close()
    wait_until(lambda: (False, None) in heard, 15, what="the loss heard")
    wait_until(lambda: election.is_leader and client.client_id[0] != session_id, 15, what="again")
    assert first is not None and (election.term or 0) > first
    (node,) = zk_client(zk).get_children(ClusterPaths(client_id).leader)
    assert node.endswith("0000000001")  # the old node went with its session
