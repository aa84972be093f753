"""The `zksched run` daemon: wires the ZooKeeper client, membership and (later) the fire path."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from zksched import __version__
from zksched.core.owners import Member
from zksched.runtime.cluster import ClusterMembership, ClusterView
from zksched.zk.connection import ZkSettings, close_quietly, make_client
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)


def default_member_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class DaemonConfig:
    zk: ZkSettings
    client_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    member_id: str = field(default_factory=default_member_id)


class Daemon:
    """One cluster member. `start()` returns at once; it joins whenever ZooKeeper answers."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.paths = ClusterPaths(config.client_id)
        self.client = make_client(config.zk)
        self.member = Member(
            member_id=config.member_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            labels=dict(config.labels),
            started_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            version=__version__,
        )
        self.cluster = ClusterMembership(
            self.client,
            self.paths,
            self.member,
            session_timeout=config.zk.session_timeout,
            hosts_label=config.zk.hosts,
        )
        self._stop_requested = threading.Event()
        self._started = False
        self._stopped = False

    @property
    def view(self) -> ClusterView:
        return self.cluster.view

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        log.info(
            "starting member %s of cluster %s (ZooKeeper %s, session timeout %gs)",
            self.member.member_id,
            self.config.client_id,
            self.config.zk.hosts,
            self.config.zk.session_timeout,
            extra={"event": "start", "member_id": self.member.member_id},
        )
        self.cluster.start()
        self.client.start_async()  # retries forever; the coordinator joins once connected

    def request_stop(self) -> None:
        """Signal-safe: ask the run loop to stop."""
        self._stop_requested.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._stop_requested.wait(timeout)

    def stop(self) -> None:
        """Graceful stop: leave (delete our node), close the session."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_requested.set()
        self.cluster.stop()
        close_quietly(self.client)
        log.info("stopped", extra={"event": "stopped"})

    def run(self) -> None:
        """Start, block until request_stop(), stop."""
        self.start()
        try:
            while not self._stop_requested.wait(1.0):
                pass
        finally:
            self.stop()
