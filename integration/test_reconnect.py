"""After a short cut a client is back on its own session at once (issue: a network blip must
cost no more than the blip). Real ZooKeeper behind the fault proxy, whose blackhole accepts
connections and answers nothing: kazoo alone waits out its whole connect timeout there."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from integration.harness import wait_until
from tools.faultproxy import BLACKHOLE, PASS, FaultProxy
from zksched.zk.connection import abandon_connection

SESSION = 3.0


def watch_states(client: KazooClient) -> list[str]:
    seen: list[str] = []
    client.add_listener(lambda state: seen.append(state) and None)
    return seen


def test_an_abandoned_connection_comes_back_on_the_same_session(
    zk_client: Callable[..., KazooClient], zk: str
) -> None:
    client = zk_client(zk, SESSION)
    session = client.client_id[0]
    states = watch_states(client)
    assert abandon_connection(client)
    wait_until(lambda: KazooState.SUSPENDED in states and client.connected, 5, what="reconnect")
    assert client.client_id[0] == session
    assert KazooState.LOST not in states
    assert client.exists("/") is not None


def test_a_connect_attempt_made_during_a_cut_does_not_outlast_it(
    zk_client: Callable[..., KazooClient], proxy_to: Callable[..., FaultProxy]
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    session = client.client_id[0]
    states = watch_states(client)
    proxy.set_mode(BLACKHOLE)
    assert abandon_connection(client)  # the reconnect starts inside the cut, and is accepted
    wait_until(lambda: KazooState.SUSPENDED in states, 5, what="suspended")
    time.sleep(0.3 * SESSION)
    proxy.set_mode(PASS)
    healed = time.monotonic()
    wait_until(lambda: client.connected, SESSION, what="reconnected")
    back = time.monotonic() - healed
    assert client.client_id[0] == session, "the session was lost"
    assert KazooState.LOST not in states
    # kazoo's own bound was the whole session timeout; ours starts at an eighth of it (and
    # the retries between attempts are as short); judged loosely against a busy machine
    assert back < SESSION / 2, f"back {back:.2f}s after the cut healed"


def test_a_silent_connection_is_given_up_while_the_session_lives(
    zk_client: Callable[..., KazooClient], proxy_to: Callable[..., FaultProxy]
) -> None:
    """Requests sent every 50 ms keep kazoo from pinging, so it never notices by itself that
    a blackholed connection is dead: the member's watchdog gives it up (ClusterMembership,
    here its building block)."""
    proxy = proxy_to()
    client = zk_client(proxy.address, SESSION)
    session = client.client_id[0]
    states = watch_states(client)
    stop = threading.Event()

    def chatter() -> None:
        while not stop.wait(0.05):
            if client.connected:
                client.exists_async("/")

    thread = threading.Thread(target=chatter, daemon=True)
    thread.start()
    try:
        proxy.set_mode(BLACKHOLE)
        time.sleep(SESSION / 3)
        assert client.connected  # kazoo still believes in it
        assert abandon_connection(client)
        time.sleep(0.2)
        proxy.set_mode(PASS)
        wait_until(lambda: client.connected, SESSION, what="back")
        assert client.exists("/") is not None
        assert client.client_id[0] == session
        assert KazooState.LOST not in states
    finally:
        stop.set()
        thread.join(2)
