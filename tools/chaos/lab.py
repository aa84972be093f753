"""The cluster under test: ZooKeeper (a standalone server or a 3-server ensemble), the
`zksched run` members with their fault proxies, the job file and the fire log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from tools.chaos.evidence import read_fires
from tools.daemonproc import DaemonProcess
from tools.faultproxy import FaultProxy
from tools.waiting import wait_until
from tools.zkserver import ZkEnsemble, ZkServer
from zksched.core.firerecord import FireRecord
from zksched.core.jobspec import JobSpec
from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

until = wait_until  # the scenarios wait with it

CALL_TIMEOUT = 5.0


@dataclass
class ChaosMember(DaemonProcess):
    """One `zksched run` subprocess of a chaos run (with its own fault proxy when it needs
    one, and its clock shifted by `--clock-offset` when asked)."""

    clock_offset: float = 0.0
    proxy: FaultProxy | None = None


@dataclass
class ChaosCluster:
    """ZooKeeper (standalone or ensemble), the members, the job file and the fire log."""

    workdir: Path
    servers: list[ZkServer]
    ensemble: bool
    session_timeout: float
    client_id: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:8]}")
    members: list[ChaosMember] = field(default_factory=list)
    every_member: list[ChaosMember] = field(default_factory=list)
    _observer: KazooClient | None = None

    @classmethod
    def start(cls, workdir: Path, *, ensemble: bool, session_timeout: float) -> ChaosCluster:
        workdir.mkdir(parents=True, exist_ok=True)
        if ensemble:
            servers = ZkEnsemble.create(workdir / "zk", size=3).servers
        else:
            servers = [ZkServer(workdir / "zk")]
        cluster = cls(workdir, servers, ensemble, session_timeout)
        try:
            for server in servers:
                server.start()
            for server in servers:
                server.wait_serving(60)
        except BaseException:
            cluster.close()
            raise
        return cluster

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    @property
    def fire_log(self) -> Path:
        return self.workdir / "fires.log"

    @property
    def paths(self) -> ClusterPaths:
        return ClusterPaths(self.client_id)

    def observer(self) -> KazooClient:
        """The suite's own ZooKeeper client (for reading members and fire records)."""
        if self._observer is None:
            client = KazooClient(hosts=self.connect_string, timeout=10)
            client.start(timeout=30)
            self._observer = client
        return self._observer

    def zksched(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "zksched", "--zk", self.connect_string]
        return subprocess.run(
            [*command, "--client-id", self.client_id, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def apply(self, job_file_text: str) -> None:
        path = self.workdir / "jobs.toml"
        path.write_text(job_file_text)
        done = self.zksched("jobs", "apply", str(path))
        if done.returncode != 0:
            raise RuntimeError(f"jobs apply failed ({done.returncode}): {done.stderr.strip()}")

    def start_member(self, *, proxied: bool = False, clock_offset: float = 0.0) -> ChaosMember:
        proxy = None
        hosts = self.connect_string
        if proxied:
            if self.ensemble:
                raise ValueError("proxied members need a standalone server")
            proxy = FaultProxy(("127.0.0.1", self.servers[0].client_port)).start()
            hosts = proxy.address
        log_path = self.workdir / f"member-{len(self.every_member)}.log"
        member = ChaosMember(
            hosts,
            self.client_id,
            log_path,
            self.session_timeout,
            run_args=["--clock-offset", str(clock_offset)] if clock_offset else [],
            env={k: v for k, v in os.environ.items() if not k.startswith("ZKSCHED_")},
            clock_offset=clock_offset,
            proxy=proxy,
        ).start()
        self.members.append(member)
        self.every_member.append(member)
        return member

    def kill(self, member: ChaosMember) -> float:
        sent = member.send(signal.SIGKILL)
        member.wait(10)
        self.members.remove(member)
        return sent

    def terminate(self, member: ChaosMember, *, wait_exit: bool = True) -> float:
        sent = member.send(signal.SIGTERM)
        self.members.remove(member)
        if wait_exit:
            try:
                member.wait(30)
            except subprocess.TimeoutExpired:
                member.send(signal.SIGKILL)
                member.wait(10)
        return sent

    def leader(self) -> ZkServer | None:
        for server in self.servers:
            if server.running and server.mode() == "leader":
                return server
        return None

    def live_member_ids(self) -> list[str]:
        try:
            names = wait(self.observer().get_children_async(self.paths.members), CALL_TIMEOUT)
        except (NoNodeError, KazooException, KazooTimeoutError):
            return []
        return sorted(ClusterPaths.member_id_of(n) for n in names)

    def wait_registered(self, member: ChaosMember, timeout: float) -> None:
        until(lambda: member.member_id in self.live_member_ids(), timeout, member.member_id)

    def firing_or_idle(self, member: ChaosMember) -> bool:
        """Whether a command of `member` has written to the fire log, or the owner table of
        the live members gives it none of the jobs seen firing (its share may be empty)."""
        fires = read_fires(self.fire_log)
        if any(f.member_id == member.member_id for f in fires):
            return True
        table = OwnerTable([Member(m) for m in self.live_member_ids()])
        return all(
            table.job_owner(job, JobSpec(name=job, schedule="* * * * * *", command=("true",)))
            != member.member_id
            for job in {f.job for f in fires}
        )

    def wait_members(self, expected: Iterable[ChaosMember], timeout: float) -> None:
        """Until exactly these members are registered."""
        members = list(expected)
        want = sorted(m.member_id for m in members)

        def registered() -> bool:
            for member in members:
                if not member.alive:  # e.g. it could not start: say why at once
                    tail = member.log_path.read_text(errors="replace").strip().splitlines()[-1:]
                    raise RuntimeError(f"member {member.member_id} exited: {''.join(tail)}")
            return self.live_member_ids() == want

        until(registered, timeout, f"members {want}")

    def fire_record(self, job: str, instant: str) -> FireRecord | None:
        try:
            raw, _ = wait(self.observer().get_async(self.paths.fire(job, instant)), CALL_TIMEOUT)
        except NoNodeError:
            return None
        try:
            return FireRecord.from_json(raw)
        except (ValueError, TypeError):
            return None

    def close(self) -> None:
        for member in list(self.every_member):
            if member.alive:
                member.send(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for member in self.every_member:
            with contextlib.suppress(subprocess.TimeoutExpired):
                member.wait(max(0.1, deadline - time.monotonic()))
            if member.alive:
                member.send(signal.SIGKILL)
                member.wait(10)
            # a command the daemon started lives in its own process group: ours to clean up
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(member.pid, signal.SIGKILL)
            if member.proxy is not None:
                member.proxy.stop()
        if self._observer is not None:
            with contextlib.suppress(Exception):
                self._observer.stop()
                self._observer.close()
            self._observer = None
        for server in self.servers:
            server.stop(kill=True)
