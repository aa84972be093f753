"""Test harness: a real ZooKeeper, daemons as subprocesses, log-event polling."""

from __future__ import annotations

import json
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

from zksched.devtools.zkserver import ZkServer, ZooKeeperNotFound, find_classpath

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
    """One `zksched run` subprocess logging JSON lines to a file."""

    zk: str
    client_id: str
    workdir: Path
    labels: dict[str, str] = field(default_factory=dict)
    session_timeout: float = SESSION_TIMEOUT
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _offset: int = 0
    _events: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> DaemonProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        n = len(list(self.workdir.glob("daemon-*.log")))
        self.log_path = self.workdir / f"daemon-{n}.log"
        self._offset, self._events = 0, []
        args = [
            sys.executable,
            "-m",
            "zksched",
            "--zk",
            self.zk,
            "--client-id",
            self.client_id,
            "--log-format",
            "json",
            "run",
            "--session-timeout",
            str(self.session_timeout),
        ]
        for key, value in self.labels.items():
            args += ["--label", f"{key}={value}"]
        # Off unless a test asks (a later --http in extra_args wins): daemons of concurrent
        # tests would otherwise all want the default port, and all but one would exit 2.
        args += ["--http", ""]
        args += self.extra_args
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def member_id(self) -> str:
        return f"{HOSTNAME}-{self.pid}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> float:
        """Send `sig`; return the wall-clock time it was sent (to compare with log ts)."""
        assert self.process is not None
        sent = time.time()
        os.kill(self.process.pid, sig)
        return sent

    def terminate(self, timeout: float = 15) -> float:
        sent = self.signal(signal.SIGTERM)
        assert self.process is not None
        self.process.wait(timeout)
        return sent

    def kill(self) -> float:
        sent = self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(10)
        return sent

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """Every JSON log record so far (optionally only those with this `event`)."""
        if self.log_path is not None and self.log_path.exists():
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self._offset += end
            for line in chunk[:end].splitlines():
                try:
                    self._events.append(json.loads(line))
                except ValueError:
                    self._events.append({"event": "raw", "msg": line.decode(errors="replace")})
        if event is None:
            return list(self._events)
        return [e for e in self._events if e.get("event") == event]

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
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def run_cli(
    zk: str, client_id: str, *args: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zksched", "--zk", zk, "--client-id", client_id, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
