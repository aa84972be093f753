"""Start real ZooKeeper servers on loopback: one standalone server, or a 3-server ensemble.

Uses `ZOOKEEPER_HOME` (a release tarball: lib/*.jar) or Debian's `zookeeper` package
(/usr/share/java). Also the engine of `scripts/zookeeper start|stop|status`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DEBIAN_JARS = [
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-transport.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "commons-cli.jar",
    "metrics-core.jar",
    "snappy-java.jar",
    "commons-io.jar",
]


class ZooKeeperNotFound(RuntimeError):
    pass


def find_classpath() -> str:
    """The Java classpath of a local ZooKeeper install, or ZooKeeperNotFound."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(Path(home).glob("lib/*.jar")) + sorted(Path(home).glob("*.jar"))
        if jars:
            return ":".join(str(j) for j in jars)
        raise ZooKeeperNotFound(f"ZOOKEEPER_HOME={home} holds no jars")
    java_dir = Path("/usr/share/java")
    if (java_dir / "zookeeper.jar").exists():
        return ":".join(str(java_dir / j) for j in DEBIAN_JARS if (java_dir / j).exists())
    raise ZooKeeperNotFound(
        "no ZooKeeper found: set ZOOKEEPER_HOME, or install Debian's package "
        "(apt-get update && apt-get install -y zookeeper)"
    )


def java_binary() -> str:
    java = shutil.which("java")
    if not java:
        raise ZooKeeperNotFound("no `java` on PATH (ZooKeeper needs a JRE)")
    return java


def install_with_apt() -> bool:
    """Install Debian's zookeeper package when we are root and apt exists. True on success."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "zookeeper"]):
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter(port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


@dataclass
class ZkServer:
    """One ZooKeeper server process. Data survives stop()/start() (same data dir)."""

    workdir: Path
    client_port: int = field(default_factory=free_port)
    server_id: int | None = None  # set for ensemble members
    peers: list[tuple[int, int, int]] = field(default_factory=list)  # (id, quorum, election)
    tick_ms: int = 250
    # the JVM's heap: tests hold little; a benchmark's million jobs are ~200 MB of buckets,
    # kept twice while an apply replaces them
    heap: str = "1g"
    extra_config: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def write_config(self) -> Path:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = {
            "tickTime": str(self.tick_ms),
            # in ticks: a follower's sync with a new leader may take a loaded machine seconds
            # (a sync that timed out restarted the election: no leader for over 30 s)
            "initLimit": "40",
            "syncLimit": "20",
            "dataDir": str(data),
            "clientPort": str(self.client_port),
            "clientPortAddress": "127.0.0.1",
            "admin.enableServer": "false",
            # Short session timeouts are allowed so that tests can expire sessions quickly.
            "minSessionTimeout": str(max(2 * self.tick_ms, 1000)),
            "maxSessionTimeout": "60000",
            "4lw.commands.whitelist": "srvr,stat,mntr,ruok",
            "forceSync": "no",  # tests only: no fsync on the log
            "maxClientCnxns": "0",
        }
        if self.peers:
            assert self.server_id is not None
            (data / "myid").write_text(f"{self.server_id}\n")
            for sid, quorum, election in self.peers:
                lines[f"server.{sid}"] = f"127.0.0.1:{quorum}:{election}"
        lines.update(self.extra_config)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return cfg

    def start(self) -> None:
        if self.running:
            return
        cfg = self.write_config()
        log = open(self.workdir / "zookeeper.log", "ab")  # noqa: SIM115 (owned by the child)
        self.process = subprocess.Popen(
            [
                java_binary(),
                f"-Xmx{self.heap}",
                "-XX:+UseSerialGC",
                "-cp",
                find_classpath(),
                "-Dzookeeper.admin.enableServer=false",
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def mode(self) -> str | None:
        """'standalone', 'leader', 'follower', or None when not serving."""
        try:
            reply = four_letter(self.client_port)
        except OSError:
            return None
        for line in reply.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited early; see {self.workdir}/zookeeper.log")
            if self.mode():
                return
            time.sleep(0.05)
        raise TimeoutError(f"ZooKeeper on port {self.client_port} not serving after {timeout}s")

    def stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@dataclass
class ZkEnsemble:
    """N servers on loopback forming one quorum."""

    servers: list[ZkServer]

    @classmethod
    def create(cls, workdir: Path, size: int = 3, tick_ms: int = 250) -> ZkEnsemble:
        peers = [(i + 1, free_port(), free_port()) for i in range(size)]
        return cls(
            [
                ZkServer(workdir / f"server{sid}", server_id=sid, peers=peers, tick_ms=tick_ms)
                for sid, _, _ in peers
            ]
        )

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    def start(self, timeout: float = 60.0) -> None:
        for server in self.servers:
            server.start()
        for server in self.servers:
            server.wait_serving(timeout)

    def leader(self) -> ZkServer | None:
        for server in self.servers:
            if server.running and server.mode() == "leader":
                return server
        return None

    def stop(self) -> None:
        for server in self.servers:
            server.stop(kill=True)


# -- scripts/zookeeper -------------------------------------------------------------------


def _pidfile(base: Path) -> Path:
    return base / "zookeeper.pid"


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/zookeeper", description=__doc__)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--port", type=int, default=int(os.environ.get("ZK_PORT", "2181")))
    parser.add_argument("--dir", default=os.environ.get("ZK_DIR", ".zookeeper"))
    args = parser.parse_args(argv)
    base = Path(args.dir).resolve()
    pidfile = _pidfile(base)
    connect = f"127.0.0.1:{args.port}"
    pid = int(pidfile.read_text()) if pidfile.exists() else None
    alive = pid is not None and _alive(pid)

    if args.action == "status":
        mode = ZkServer(base, client_port=args.port).mode()
        print(
            f"{connect} {'serving (' + mode + ')' if mode else 'not serving'}"
            + (f", pid {pid}" if alive else "")
        )
        return 0 if mode else 1
    if args.action == "stop":
        if alive and pid is not None:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not _alive(pid):
                    break
                time.sleep(0.1)
        pidfile.unlink(missing_ok=True)
        print("stopped")
        return 0
    # start
    if alive:
        print(connect)
        return 0
    try:
        find_classpath()
    except ZooKeeperNotFound:
        print("ZooKeeper is not installed; installing Debian's package...", file=sys.stderr)
        if not install_with_apt():
            print(
                "could not install it: set ZOOKEEPER_HOME or install `zookeeper` with apt",
                file=sys.stderr,
            )
            return 1
    base.mkdir(parents=True, exist_ok=True)
    server = ZkServer(base, client_port=args.port, tick_ms=500)
    server.extra_config["forceSync"] = "yes"  # a development server keeps its data safely
    server.start()
    try:
        server.wait_serving(60)
    except (RuntimeError, TimeoutError) as exc:
        print(f"ZooKeeper did not start: {exc}", file=sys.stderr)
        server.stop(kill=True)
        return 1
    assert server.process is not None
    pidfile.write_text(str(server.process.pid))
    print(connect)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie or a reused pid that is not java does not count
        return "java" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
