"""Fixtures for tests against a real ZooKeeper.

Where the ZooKeeper comes from, in order: `ZKSCHED_TEST_ZK` (a connect string you give);
testcontainers when a Docker engine answers; a server started here from a local install
(ZOOKEEPER_HOME or Debian's `zookeeper` package). When none can be had the tests FAIL with
the reason — in CI and everywhere else: a suite that skips its real tests proves nothing.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from integration.harness import (
    DaemonProcess,
    NoZooKeeper,
    container_zookeeper,
    docker_answers,
    local_zookeeper,
    wait_for_zk,
)
from tools.faultproxy import FaultProxy
from tools.zkserver import ZkEnsemble, ZkServer
from zksched.zk.connection import ZkSettings, close_quietly, make_client, parse_connect_string


@pytest.fixture(scope="session")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Connect string of a real ZooKeeper shared by the session (each test its own cluster id)."""
    given = os.environ.get("ZKSCHED_TEST_ZK")
    try:
        if given:
            wait_for_zk(given, 30)
            yield given
        elif docker_answers():
            with container_zookeeper() as hosts:
                yield hosts
        else:
            with local_zookeeper(tmp_path_factory.mktemp("zk")) as server:
                yield server.connect_string
    except NoZooKeeper as exc:
        pytest.fail(f"no ZooKeeper for the integration tests: {exc}", pytrace=False)


@pytest.fixture
def client_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kazoo(zk: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_client() -> Iterator[Callable[..., KazooClient]]:
    """Factory: a started zksched-configured client (`make_client`); all closed at the end."""
    made: list[KazooClient] = []

    def start(hosts: str, session_timeout: float = 3.0, **settings: object) -> KazooClient:
        client = make_client(
            ZkSettings(hosts=hosts, session_timeout=session_timeout, **settings)  # type: ignore[arg-type]
        )
        client.start(timeout=10)
        made.append(client)
        return client

    yield start
    for client in made:
        close_quietly(client)


@pytest.fixture
def zk_server(tmp_path: Path) -> Iterator[ZkServer]:
    """A dedicated local server this test may stop and start (not yet started)."""
    server = ZkServer(tmp_path / "zk-own")
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ZkEnsemble]:
    """A running 3-server ensemble on loopback ports."""
    group = ZkEnsemble.create(tmp_path / "ensemble", size=3)
    try:
        group.start()
    except Exception as exc:
        group.stop()
        pytest.fail(f"could not start a 3-server ZooKeeper ensemble: {exc}", pytrace=False)
    yield group
    group.stop()


@pytest.fixture
def proxy_to(zk: str) -> Iterator[Callable[[str | None], FaultProxy]]:
    """Factory: a fault proxy in front of ZooKeeper (default: the shared server)."""
    proxies: list[FaultProxy] = []

    def make(target: str | None = None) -> FaultProxy:
        host, port = parse_connect_string(target or zk).hosts[0]
        proxy = FaultProxy((host, port)).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.stop()


@pytest.fixture
def daemons(tmp_path: Path, zk: str, client_id: str) -> Iterator[Callable[..., DaemonProcess]]:
    """Factory: start `zksched run` subprocesses; all are killed at the end of the test."""
    started: list[DaemonProcess] = []

    def start(zk_hosts: str | None = None, **kwargs: object) -> DaemonProcess:
        daemon = DaemonProcess(
            zk=zk_hosts or zk,
            client_id=client_id,
            workdir=tmp_path / f"d{len(started)}",
            **kwargs,  # type: ignore[arg-type]
        ).start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.alive:
            with contextlib.suppress(Exception):
                daemon.kill()
