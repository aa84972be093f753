"""The ZooKeeper layer's answers to failures, in-process against a real server."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.security import Permissions

from integration.harness import wait_until
from tools.faultproxy import (
    BLACKHOLE,
    CORRUPT_ONCE,
    DROP_REPLIES,
    PASS,
    THROTTLE,
    FaultProxy,
)
from zksched.core.members import Member
from zksched.runtime.membership import ClusterView
from zksched.runtime.membership.cluster_membership import ClusterMembership
from zksched.zk.connection import ZkSettings, close_quietly, connect
from zksched.zk.membership import MemberReader, MemberRegistration
from zksched.zk.paths import ClusterPaths

TIMEOUT = 3.0


def own_nodes(kazoo: KazooClient, paths: ClusterPaths, member_id: str) -> list[str]:
    return [
        c for c in kazoo.get_children(paths.members) if ClusterPaths.member_id_of(c) == member_id
    ]


def test_lost_create_reply_never_leaves_two_nodes(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address)
    paths = ClusterPaths(client_id)
    client.ensure_path(paths.members)
    reader = MemberReader(client, paths, 1.0)
    registration = MemberRegistration(client, paths, Member(member_id="m-1"), 1.0)
    session = client.client_id[0]

    snapshot = reader.read()  # nobody registered yet
    proxy.set_mode(DROP_REPLIES)  # the create reaches the server; its reply never comes back
    with pytest.raises((KazooTimeoutError, KazooException)):
        registration.ensure(snapshot)
    # The create did happen on the server.
    wait_until(lambda: own_nodes(kazoo, paths, "m-1"), 5, what="the create to land")
    proxy.set_mode(PASS)
    wait_until(
        lambda: (
            client.state == KazooState.CONNECTED
            and client.client_id[0] == session
            and _pingable(client)
        ),
        10,
        what="reconnect on the same session",
    )

    znode = registration.ensure(reader.read())
    assert own_nodes(kazoo, paths, "m-1") == [znode]
    registration.ensure(reader.read())  # idempotent
    assert own_nodes(kazoo, paths, "m-1") == [znode]


def _pingable(client: KazooClient) -> bool:
    try:
        client.exists_async("/").get(timeout=1)
        return True
    except Exception:
        return False


def test_duplicate_node_of_the_same_session_is_deleted(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    client = zk_client(zk)
    paths = ClusterPaths(client_id)
    client.ensure_path(paths.members)
    reader = MemberReader(client, paths, 2.0)
    registration = MemberRegistration(client, paths, Member(member_id="m-1"), 2.0)
    first = registration.ensure(reader.read())
    # A timed-out create of ours that landed late: same session, same member id.
    client.create(paths.member_prefix("m-1"), b"{}", ephemeral=True, sequence=True)
    assert len(own_nodes(kazoo, paths, "m-1")) == 2
    assert registration.ensure(reader.read()) == first
    assert own_nodes(kazoo, paths, "m-1") == [first]


def test_member_rejoins_after_real_session_expiry(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    client = zk_client(zk)
    paths = ClusterPaths(client_id)
    membership = ClusterMembership(client, paths, Member(member_id="m-1"), TIMEOUT)
    lost = threading.Event()
    membership.add_session_loss_listener(lost.set)
    membership.start()
    membership.start()  # idempotent
    wait_until(lambda: membership.view.active, 10, what="joined")
    first = membership.view.my_znode

    # Expire the session for real: take it over with a second client, then close that one.
    session_id, password = client.client_id
    thief = KazooClient(hosts=zk, client_id=(session_id, password), timeout=TIMEOUT)
    thief.start(timeout=10)
    thief.stop()
    thief.close()

    wait_until(lost.is_set, 15, what="session loss noticed")
    wait_until(
        lambda: membership.view.active and membership.view.my_znode != first,
        15,
        what="rejoined on a new session",
    )
    assert client.client_id[0] != session_id
    assert own_nodes(kazoo, paths, "m-1") == [membership.view.my_znode]
    membership.stop()
    assert own_nodes(kazoo, paths, "m-1") == []


def test_suspended_member_owns_nothing_and_declares_loss_before_expiry(
    zk_client: Callable[..., KazooClient], proxy_to: Callable[..., FaultProxy], client_id: str
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address)
    membership = ClusterMembership(
        client, ClusterPaths(client_id), Member(member_id="m-1"), TIMEOUT
    )
    lost_at: list[float] = []
    membership.add_session_loss_listener(lambda: lost_at.append(time.monotonic()))
    membership.start()
    wait_until(lambda: membership.view.owns("any-job", {}), 10, what="owning as sole member")

    cut = time.monotonic()
    proxy.set_mode(BLACKHOLE)
    wait_until(lambda: not membership.view.connected, TIMEOUT + 2, what="suspended")
    assert not membership.view.owns("any-job", {})  # fail-safe while SUSPENDED
    wait_until(lambda: lost_at, TIMEOUT + 2, what="session declared lost")
    # Declared lost before the server can have expired the session (cut + timeout).
    assert lost_at[0] - cut < TIMEOUT
    proxy.set_mode(PASS)
    wait_until(lambda: membership.view.owns("any-job", {}), 20, what="owning again")
    membership.stop()


def test_members_watch_survives_a_reconnect(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[..., FaultProxy],
    zk: str,
    client_id: str,
) -> None:
    proxy = proxy_to()
    watcher_client = zk_client(proxy.address)
    paths = ClusterPaths(client_id)
    watcher = ClusterMembership(watcher_client, paths, Member(member_id="w"), TIMEOUT)
    watcher.start()
    wait_until(lambda: watcher.view.active, 10, what="watcher joined")
    proxy.set_mode("reset")  # drop the connection; the session survives
    time.sleep(0.3)
    proxy.set_mode(PASS)
    wait_until(lambda: watcher.view.active, 10, what="watcher reconnected")

    other = ClusterMembership(zk_client(zk), paths, Member(member_id="o"), TIMEOUT)
    other.start()
    wait_until(lambda: set(watcher.view.table.member_ids) == {"w", "o"}, 5, what="join seen")
    other.stop()
    wait_until(lambda: set(watcher.view.table.member_ids) == {"w"}, 5, what="leave seen")
    watcher.stop()


def test_digest_auth_makes_znodes_read_only_for_others(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    client = zk_client(zk, auth="zksched:s3cret")
    paths = ClusterPaths(client_id)
    membership = ClusterMembership(client, paths, Member(member_id="m-1"), TIMEOUT)
    membership.start()
    wait_until(lambda: membership.view.active, 10, what="joined")
    znode = paths.member(membership.view.my_znode or "")

    for path in (paths.members, znode):
        acl, _ = client.get_acls(path)
        world = [a for a in acl if a.id.scheme == "world"]
        assert world and all(a.perms == Permissions.READ for a in world)
        assert any(a.id.scheme == "digest" and a.perms == Permissions.ALL for a in acl)

    stranger = zk_client(zk)
    assert stranger.get(znode)[0]  # anyone may read
    with pytest.raises(NoAuthError):
        stranger.delete(znode)
    with pytest.raises(NoAuthError):
        stranger.create(paths.members + "/intruder", b"x")
    membership.stop()


def test_chroot_is_created_and_used(kazoo: KazooClient, zk: str, client_id: str) -> None:
    chroot = f"/chroot-{client_id}"
    client = connect(ZkSettings(hosts=zk + chroot, session_timeout=TIMEOUT), 10)
    membership = ClusterMembership(
        client, ClusterPaths(client_id), Member(member_id="m-1"), TIMEOUT
    )
    membership.start()
    wait_until(lambda: membership.view.active, 10, what="joined under the chroot")
    assert kazoo.get_children(f"{chroot}/zksched/{client_id}/members")
    membership.stop()
    close_quietly(client)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_member_recovers_when_kazoo_connection_loop_dies(
    zk_client: Callable[..., KazooClient], proxy_to: Callable[..., FaultProxy], client_id: str
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address)
    membership = ClusterMembership(
        client, ClusterPaths(client_id), Member(member_id="m-1"), TIMEOUT
    )
    published: list[ClusterView] = []
    # Every published view is kept: polling the current one can miss the short outage on a
    # loaded machine (the restart comes 0.2 s after the loop dies).
    membership.add_view_listener(published.append)
    membership.start()
    wait_until(lambda: membership.view.active, 30, what="joined")
    proxy.set_mode(CORRUPT_ONCE)
    client.exists_async("/")  # provoke a reply, which the proxy swallows
    time.sleep(0.2)
    client.exists_async("/")  # the next reply then carries an unexpected xid
    wait_until(
        lambda: any(not view.connected for view in published), 30, what="kazoo's loop to die"
    )
    proxy.set_mode(PASS)
    wait_until(lambda: membership.view.active, 30, what="client restarted and member back")
    membership.stop()


def test_a_resync_with_the_same_members_publishes_nothing_and_keeps_the_table(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[..., FaultProxy],
    zk: str,
    client_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-read that finds the members unchanged (the periodic resync, a reconnect) must not
    make the scheduler re-align 100,000 jobs, nor recompute their owners."""
    monkeypatch.setattr("zksched.runtime.membership.cluster_membership.RESYNC_INTERVAL", 0.2)
    proxy = proxy_to()
    paths = ClusterPaths(client_id)
    membership = ClusterMembership(zk_client(proxy.address), paths, Member(member_id="m"), TIMEOUT)
    published = []
    membership.add_view_listener(published.append)
    membership.start()
    wait_until(lambda: membership.view.active, 10, what="joined")
    table = membership.view.table
    assert table.owner("job-1") == "m"
    seen = len(published)
    time.sleep(1.5)  # several resyncs
    assert len(published) == seen
    assert membership.view.table is table

    proxy.set_mode("reset")  # reconnect, same session: disconnected, then the same view
    wait_until(lambda: not membership.view.connected, 5, what="disconnected")
    proxy.set_mode(PASS)
    wait_until(lambda: membership.view.active, 10, what="reconnected")
    assert membership.view.table is table  # its memo of owners kept

    other = ClusterMembership(zk_client(zk), paths, Member(member_id="o"), TIMEOUT)
    other.start()
    wait_until(lambda: len(membership.view.table) == 2, 5, what="join seen")
    assert published[-1].table is not table
    other.stop()
    membership.stop()


def test_a_deep_queue_of_own_requests_is_not_silence(
    zk_client: Callable[..., KazooClient], proxy_to: Callable[..., FaultProxy], client_id: str
) -> None:
    """Fires due together queue thousands of requests at once, and the watchdog's probe waits
    behind all of them while ZooKeeper answers every one. That is contact, not silence:
    counting only the probe's reply made a burst look like a dying connection, and the loss
    policy terminated the commands of a session that was fine (CI's 2,000-job burst)."""
    proxy = proxy_to()
    paths = ClusterPaths(client_id)
    client = zk_client(proxy.address)
    membership = ClusterMembership(client, paths, Member(member_id="m"), TIMEOUT)
    connected: list[bool] = []
    membership.add_view_listener(lambda view: connected.append(view.connected))
    membership.start()
    wait_until(lambda: membership.view.active, 10, what="joined")
    seen = len(connected)
    # replies trickle in at 16 KiB/s (a saturated server), each exists reply ~90 bytes: the
    # probe behind 1,000 of them waits several seconds, well past the loss margin
    proxy.set_mode(THROTTLE, rate=16 * 1024)
    try:
        queued = [client.exists_async(paths.members) for _ in range(1000)]
        last = client.exists_async(paths.members)  # where the probe stands: behind them
        began = time.monotonic()
        for result in queued:
            result.get(timeout=60)
        last.get(timeout=60)
        behind = time.monotonic() - began
    finally:
        proxy.set_mode(PASS)
    assert behind > membership.loss_margin, f"the queue drained in {behind:.2f}s; no test"
    assert all(connected[seen:]), "went silent while ZooKeeper answered its every request"
    assert membership.view.active
    membership.stop()


def test_a_held_member_reads_the_cluster_but_joins_only_when_told(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    """A starting daemon holds its node back until its owner table is weighed: meanwhile it
    sees the members (a connected view that owns nothing, carrying the record it will join
    with), and the others keep its share."""
    paths = ClusterPaths(client_id)
    other = ClusterMembership(zk_client(zk), paths, Member(member_id="old-1"), TIMEOUT)
    other.start()
    wait_until(lambda: other.view.active, 30, what="the first member joined")
    me = Member(member_id="new-2", labels={"zone": "a"})
    held = ClusterMembership(zk_client(zk), paths, me, TIMEOUT, hold_join=60)
    published: list[ClusterView] = []
    held.add_view_listener(published.append)
    held.start()
    waiting = wait_until(
        lambda: next((v for v in published if v.connected), None), 30, what="a connected view"
    )
    assert waiting.joining == me and waiting.my_znode is None and not waiting.active
    assert waiting.table.member_ids == ("old-1",)
    time.sleep(1.0)  # several of its loop's turns: still no node
    assert not own_nodes(kazoo, paths, "new-2")
    assert other.view.table.member_ids == ("old-1",)

    held.join()
    wait_until(lambda: held.view.active, 30, what="joined once told")
    assert held.view.joining is None
    assert own_nodes(kazoo, paths, "new-2") == [held.view.my_znode]
    wait_until(lambda: other.view.table.member_ids == ("new-2", "old-1"), 30, what="seen")
    held.stop()
    other.stop()


def test_a_held_member_joins_by_itself_after_the_hold_limit(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    zk: str,
    client_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Never told (its job table could not be read): it joins after the limit, and says so."""
    paths = ClusterPaths(client_id)
    other = ClusterMembership(zk_client(zk), paths, Member(member_id="old-1"), TIMEOUT)
    other.start()
    wait_until(lambda: other.view.active, 30, what="the first member joined")
    held = ClusterMembership(zk_client(zk), paths, Member(member_id="slow-3"), TIMEOUT, hold_join=1)
    with caplog.at_level(logging.WARNING):
        held.start()
        wait_until(lambda: held.view.active, 30, what="joined after the hold limit")
    assert own_nodes(kazoo, paths, "slow-3") == [held.view.my_znode]
    assert any(getattr(r, "event", None) == "join-unready" for r in caplog.records)
    held.stop()
    other.stop()


def test_a_member_that_finds_nobody_joins_at_once_though_held(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    """Nobody would hand it a share: members starting together see each other at once."""
    paths = ClusterPaths(client_id)
    first = ClusterMembership(zk_client(zk), paths, Member(member_id="first-4"), TIMEOUT, 60)
    first.start()
    wait_until(lambda: first.view.active, 30, what="joined without being told")
    assert own_nodes(kazoo, paths, "first-4") == [first.view.my_znode]
    first.stop()
