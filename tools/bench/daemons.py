"""What the cluster benchmarks share: their own ZooKeeper, job files applied with the CLI,
members as `zksched run` subprocesses or as `Daemon`s in this process, waiting, and reading
the members' fire events."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.daemonproc import DaemonProcess, process_cpu_seconds
from tools.waiting import wait_until
from tools.zkserver import ZkServer
from zksched.runtime.daemon import DaemonConfig

wait_for = wait_until  # the benchmarks wait with it

SESSION_TIMEOUT = 4.0  # the peers were measured with 4 s


@contextlib.contextmanager
def own_zookeeper(workdir: Path) -> Iterator[str]:
    """A standalone ZooKeeper on a free port for one benchmark (forceSync=no, as in tests)."""
    server = ZkServer(workdir / "zookeeper", heap="3g")
    server.start()
    try:
        server.wait_serving(60)
        if server.process is not None:
            _SERVER_PIDS[server.connect_string] = server.process.pid
        yield server.connect_string
    finally:
        _SERVER_PIDS.pop(server.connect_string, None)
        server.stop(kill=True)


_SERVER_PIDS: dict[str, int] = {}  # the servers of own_zookeeper, by connect string


def zookeeper_cpu_seconds(zk: str) -> float:
    """CPU time of the benchmark's own ZooKeeper server at `zk` (0 for another server)."""
    pid = _SERVER_PIDS.get(zk)
    return 0.0 if pid is None else process_cpu_seconds(pid)


def job_table(jobs: Mapping[str, Mapping[str, Any]]) -> str:
    """TOML for `jobs apply`: values are strings, lists of strings, integers or tables."""

    def value(v: Any) -> str:
        if isinstance(v, dict):  # an inline table: `labels = {"bench" = "full"}`
            return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(json.dumps(x) for x in v) + "]"
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v) if isinstance(v, str) else str(v)

    parts = []
    for name, keys in jobs.items():
        body = "".join(f"{k} = {value(v)}\n" for k, v in keys.items())
        parts.append(f"[jobs.{name}]\n{body}")
    return "\n".join(parts)


def zksched_cli(zk: str, client_id: str, *args: str, timeout: float = 600) -> float:
    """Run one `zksched` command; returns its wall time. Raises with its output on failure."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "zksched", "--zk", zk, "--client-id", client_id, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"zksched {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return elapsed


FILE_JOBS = 100_000  # ~6 MB of TOML a file, within a job file's 16 MiB


def apply_jobs(zk: str, client_id: str, workdir: Path, jobs: Mapping[str, Any]) -> float:
    """`jobs apply --prune` of these jobs, as an operator keeps a large table: several files
    of at most FILE_JOBS jobs each (one file has a size limit)."""
    names = list(jobs)
    tag = uuid.uuid4().hex[:6]
    paths = []
    for n, start in enumerate(range(0, max(len(names), 1), FILE_JOBS)):
        path = workdir / f"jobs-{tag}-{n}.toml"
        path.write_text(job_table({k: jobs[k] for k in names[start : start + FILE_JOBS]}))
        paths.append(str(path))
    return zksched_cli(zk, client_id, "jobs", "apply", "--prune", *paths)


@dataclass
class BenchMember(DaemonProcess):
    """One `zksched run` subprocess of a benchmark (session timeout as the issue's peers)."""

    session_timeout: float = SESSION_TIMEOUT


@contextlib.contextmanager
def members(zk: str, client_id: str, workdir: Path, count: int) -> Iterator[list[BenchMember]]:
    started: list[BenchMember] = []
    try:  # each one stopped on the way out, even if the start of a later one is interrupted
        for i in range(count):
            started.append(BenchMember(zk, client_id, workdir / f"member-{i}.log").start())
        wait_for(lambda: all(m.members_seen() == count for m in started), 60, "members to join")
        yield started
    finally:
        for m in started:
            m.stop()


@contextlib.contextmanager
def in_process_members(zk: str, client_id: str, count: int) -> Iterator[list[Any]]:
    from zksched.runtime.daemon import Daemon
    from zksched.zk.connection import ZkSettings

    daemons = [
        Daemon(
            DaemonConfig(
                zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
                client_id=client_id,
                member_id=f"bench-{i}",
            )
        )
        for i in range(count)
    ]
    try:
        yield daemons
    finally:
        for d in daemons:
            with contextlib.suppress(Exception):
                d.stop()


def sleep_until(epoch: float) -> None:
    time.sleep(max(0.0, epoch - time.time()))


def ms_between(
    fires: Iterable[Mapping[str, Any]], since: str, until: str = "started_ts"
) -> list[float]:
    """Per fire event, milliseconds from its `since` to its `until` timestamp (epoch s)."""
    return [(float(e[until]) - float(e[since])) * 1000 for e in fires]


def probe_job(out: Path, **keys: Any) -> dict[str, Any]:
    """An every-second job that appends each run (fire key, member, start, attempt) to
    `out`; an instant missed during a handover is run late, not lost (`catchup = "all"`)."""
    script = f'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID $(date +%s.%N) $ZKSCHED_ATTEMPT" >> {out}'
    return {
        "schedule": "* * * * * *",
        "command": ["sh", "-c", script],
        "catchup": "all",
        "catchup_window": "5m",
        "history": 1000,  # every record kept: what became of a lost instant
        **keys,
    }


def every_second_jobs(count: int, prefix: str) -> dict[str, dict[str, Any]]:
    return {
        f"{prefix}-{i:05d}": {"schedule": "* * * * * *", "command": ["true"]} for i in range(count)
    }
