"""Test harness: a real ZooKeeper, daemons as subprocesses, log-event polling."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from integration.hang import hang_guard
from tools import daemonproc
from tools.zkserver import ZkServer, ZooKeeperNotFound, find_classpath
from zksched.runtime.daemon import Daemon, DaemonConfig
from zksched.zk.connection import ZkSettings

HOSTNAME = socket.gethostname()
SESSION_TIMEOUT = 3.0  # short, so that expiry tests stay quick; the server allows >= 1 s


class NoZooKeeper(RuntimeError):
    """No ZooKeeper could be had for the tests (the message says what was tried)."""


def docker_answers() -> bool:
    """True when a Docker engine (not just the client) responds."""
    try:
        import docker  # testcontainers' dependency

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def wait_for_zk(hosts: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        client = KazooClient(hosts=hosts)
        try:
            client.start(timeout=1.0)
            client.stop()
            client.close()
            return
        except Exception as exc:  # not up yet
            last = exc
            time.sleep(0.2)
    raise NoZooKeeper(f"ZooKeeper at {hosts} did not answer within {timeout}s: {last}")


@contextmanager
def container_zookeeper() -> Iterator[str]:
    """A ZooKeeper 3.8 container (testcontainers has no ZooKeeper module: generic + retry)."""
    from testcontainers.core.container import DockerContainer

    container = (
        DockerContainer("zookeeper:3.8")
        .with_exposed_ports(2181)
        .with_env("ZOO_TICK_TIME", "250")
        .with_env("ZOO_4LW_COMMANDS_WHITELIST", "srvr,ruok")
        .with_env("ZOO_CFG_EXTRA", "minSessionTimeout=1000 maxSessionTimeout=60000 forceSync=no")
    )
    container.start()
    try:
        hosts = f"{container.get_container_host_ip()}:{container.get_exposed_port(2181)}"
        wait_for_zk(hosts, 60)
        yield hosts
    finally:
        container.stop()


@contextmanager
def local_zookeeper(workdir: Path) -> Iterator[ZkServer]:
    try:
        find_classpath()
    except ZooKeeperNotFound as exc:
        raise NoZooKeeper(str(exc)) from None
    server = ZkServer(workdir)
    server.start()
    try:
        server.wait_serving(60)
        yield server
    finally:
        server.stop(kill=True)


# -- daemons as subprocesses -----------------------------------------------------------------


@dataclass
class DaemonProcess:
    """One `zksched run` subprocess for a test (tools/daemonproc.py), logging
    JSON lines to a new file in `workdir` at each start."""

    zk: str
    client_id: str
    workdir: Path
    labels: dict[str, str] = field(default_factory=dict)
    session_timeout: float = SESSION_TIMEOUT
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # added to this process's
    entry: tuple[str, ...] = ("-m", "zksched")  # e.g. a test hook's (tools/die_after_claim.py)
    _daemon: daemonproc.DaemonProcess | None = None

    def start(self) -> DaemonProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        n = len(list(self.workdir.glob("daemon-*.log")))
        self._daemon = daemonproc.DaemonProcess(
            self.zk,
            self.client_id,
            self.workdir / f"daemon-{n}.log",
            self.session_timeout,
            labels=self.labels,
            run_args=self.extra_args,  # a --http here wins over the default ""
            env={**os.environ, **self.env},
            entry=self.entry,
        ).start()
        return self

    @property
    def daemon(self) -> daemonproc.DaemonProcess:
        assert self._daemon is not None, "not started"
        return self._daemon

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return None if self._daemon is None else self._daemon.process

    @property
    def log_path(self) -> Path | None:
        return None if self._daemon is None else self._daemon.log_path

    @property
    def pid(self) -> int:
        return self.daemon.pid

    @property
    def member_id(self) -> str:
        return self.daemon.member_id

    @property
    def alive(self) -> bool:
        return self._daemon is not None and self._daemon.alive

    def signal(self, sig: int) -> float:
        """Send `sig`; return the wall-clock time it was sent (to compare with log ts)."""
        return self.daemon.send(sig)

    def terminate(self, timeout: float = 15) -> float:
        sent = self.signal(signal.SIGTERM)
        self.daemon.wait(timeout)
        return sent

    def kill(self) -> float:
        sent = self.signal(signal.SIGKILL)
        self.daemon.wait(10)
        return sent

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """Every JSON log record so far (optionally only those with this `event`)."""
        return [] if self._daemon is None else self._daemon.events(event)

    def last_members(self) -> list[str] | None:
        found = self.events("members")
        if not found:
            return None
        last = found[-1]
        # a later disconnect means the member owns nothing until it reads members again
        for e in self.events("session"):
            if e["ts"] > last["ts"] and e.get("state") != "CONNECTED":
                return None
        return list(last["members"])

    def log_text(self) -> str:
        return "" if self._daemon is None else self._daemon.log_text()


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition"
) -> Any:
    timeout = hang_guard(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def run_cli(
    zk: str, client_id: str, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """One `zksched` command. A second or two; the timeout is only for a stuck one (a
    machine loaded by other work has taken over 30 s to start a Python process)."""
    return subprocess.run(
        [sys.executable, "-m", "zksched", "--zk", zk, "--client-id", client_id, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def member_with_jobs(zk: str, client_id: str, tmp_path: Path, jobs: str) -> Daemon:
    """One started in-process member of a cluster whose job table is `jobs` (TOML)."""
    (tmp_path / "jobs.toml").write_text(jobs)
    result = run_cli(zk, client_id, "jobs", "apply", str(tmp_path / "jobs.toml"))
    assert result.returncode == 0, result.stderr
    member = Daemon(
        DaemonConfig(
            zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
            client_id=client_id,
            member_id="m-1",
        )
    )
    member.start()
    return member
