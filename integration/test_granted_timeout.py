"""The session timeout the server grants, against a real server that clamps it.

ZooKeeper bounds a session's timeout by its `minSessionTimeout` and `maxSessionTimeout`;
kazoo keeps the one asked for. A member that counted its loss margins on the one asked for
would, behind a silent connection, keep acting after the server had expired its session
(the longer one asked for than the server allows). zksched notes the granted one at each
connect and acts on the shorter of the two.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from integration.harness import DaemonProcess, wait_until
from tools.faultproxy import BLACKHOLE, PASS, FaultProxy
from tools.zkserver import ZkServer
from zksched.app.coordination import Coordinator
from zksched.core.members import Member
from zksched.runtime.daemon import Daemon, DaemonConfig
from zksched.runtime.membership.cluster_membership import ClusterMembership
from zksched.zk.connection import ZkSettings, close_quietly, make_client
from zksched.zk.handler import session_timeout_of
from zksched.zk.paths import ClusterPaths

MIN, MAX = 2.0, 4.0  # seconds the server allows


@pytest.fixture(scope="module")
def clamping_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = ZkServer(
        tmp_path_factory.mktemp("clamping") / "zk",
        extra_config={
            "minSessionTimeout": str(int(MIN * 1000)),
            "maxSessionTimeout": str(int(MAX * 1000)),
        },
    )
    server.start()
    try:
        server.wait_serving(60)
        yield server.connect_string
    finally:
        server.stop(kill=True)


def test_a_longer_timeout_than_allowed_is_noted_with_a_warning(
    zk_client: Callable[..., KazooClient], clamping_zk: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="zksched.zk.connection"):
        client = zk_client(clamping_zk, 10.0)
    assert client.handler.granted_timeout == MAX
    assert session_timeout_of(client, 10.0) == MAX
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "session-timeout"]
    assert warning.levelno == logging.WARNING
    assert "granted a session timeout of 4s, not the 10s asked for" in warning.getMessage()


def test_a_shorter_timeout_than_allowed_keeps_the_one_asked_for(
    zk_client: Callable[..., KazooClient], clamping_zk: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="zksched.zk.connection"):
        client = zk_client(clamping_zk, 1.0)
    assert client.handler.granted_timeout == MIN
    assert session_timeout_of(client, 1.0) == 1.0  # the shorter: margins stay conservative
    (note,) = [r for r in caplog.records if getattr(r, "event", "") == "session-timeout"]
    assert note.levelno == logging.INFO


def test_a_silent_member_declares_loss_within_the_granted_session(
    zk_client: Callable[..., KazooClient],
    clamping_zk: str,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    proxy = proxy_to(clamping_zk)
    client = zk_client(proxy.address, 10.0)
    membership = ClusterMembership(client, ClusterPaths(client_id), Member(member_id="m-1"), 10.0)
    assert membership.loss_margin == MAX / 2
    lost_at = listen_for_loss(membership)
    membership.start()
    try:
        # before the server can have expired the session (4 s granted; 5 s was the margin
        # counted on the 10 s asked for)
        cut_off_and_see_the_loss_in_time(membership, proxy, lost_at)
    finally:
        membership.stop()


def listen_for_loss(membership: ClusterMembership) -> list[float]:
    lost_at: list[float] = []
    membership.add_session_loss_listener(lambda: lost_at.append(time.monotonic()))
    return lost_at


def cut_off_and_see_the_loss_in_time(
    membership: ClusterMembership, proxy: FaultProxy, lost_at: list[float]
) -> None:
    wait_until(lambda: membership.view.owns("any-job", {}), 10, what="owning as sole member")
    cut = time.monotonic()
    proxy.set_mode(BLACKHOLE)
    wait_until(lambda: lost_at, MAX + 2, what="session declared lost")
    assert lost_at[0] - cut < MAX
    proxy.set_mode(PASS)


def test_a_silent_lock_holder_loses_the_lock_within_the_granted_session(
    zk_client: Callable[..., KazooClient],
    clamping_zk: str,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    proxy = proxy_to(clamping_zk)
    client = zk_client(proxy.address, 10.0)
    reasons: list[str] = []
    lock = Coordinator(client, ClusterPaths(client_id), "m-a").lock("x", on_lost=reasons.append)
    assert lock.acquire()
    cut = time.monotonic()
    proxy.set_mode(BLACKHOLE)
    wait_until(lambda: lock.lost, MAX + 2, what="the hold declared lost")
    assert time.monotonic() - cut < MAX
    assert lock.lost_reason == "suspended"
    # the callback runs after `lost` turns True, on another thread
    wait_until(lambda: reasons, 10, what="the lost callback")
    assert reasons == ["suspended"]
    proxy.set_mode(PASS)
    wait_until(lambda: client.state != KazooState.SUSPENDED, 15, what="connected or expired")
    lock.release()


def test_the_daemon_says_what_the_server_granted(
    daemons: Callable[..., DaemonProcess], clamping_zk: str
) -> None:
    daemon = daemons(zk_hosts=clamping_zk, session_timeout=10.0)
    wait_until(
        lambda: daemon.events("session-timeout"),
        30,
        what="the daemon's note",
    )
    (event,) = daemon.events("session-timeout")
    assert event["granted"] == MAX and event["asked"] == 10.0
    assert event["level"] == "warning"


def test_the_reaper_grace_follows_the_granted_session(clamping_zk: str, client_id: str) -> None:
    daemon = Daemon(
        DaemonConfig(
            zk=ZkSettings(hosts=clamping_zk, session_timeout=10.0),
            client_id=client_id,
            member_id="m-reaper",
        )
    )
    daemon.start()
    try:
        wait_until(lambda: daemon.view.connected, 15, what="connected")
        assert daemon.reaper is not None
        wait_until(lambda: daemon.reaper._grace == MAX / 4, 5, what="the grace fitted")
    finally:
        daemon.stop()


def test_a_member_started_before_its_client_connects_keeps_the_granted_margins(
    clamping_zk: str, proxy_to: Callable[..., FaultProxy], client_id: str
) -> None:
    """As the daemon starts: membership first, then the client. The first look of the
    contact watchdog must not wait a twelfth of the session asked for (5 s of 60)."""
    proxy = proxy_to(clamping_zk)
    client = make_client(ZkSettings(hosts=proxy.address, session_timeout=60.0))
    membership = ClusterMembership(client, ClusterPaths(client_id), Member(member_id="m-1"), 60.0)
    lost_at = listen_for_loss(membership)
    membership.start()
    client.start(timeout=10)
    try:
        cut_off_and_see_the_loss_in_time(membership, proxy, lost_at)
    finally:
        membership.stop()
        close_quietly(client)


def test_answers_to_pings_count_as_contact(zk_client: Callable[..., KazooClient], zk: str) -> None:
    client = zk_client(zk, 3.0)
    client.exists("/")
    heard = client.handler.last_reply
    time.sleep(2.5)  # no request: kazoo pings every read timeout / 2 (1 s here)
    assert client.handler.last_reply > heard + 1
