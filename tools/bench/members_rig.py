"""What the `members` benchmark (members.py) drives: its ZooKeeper (one server or an
ensemble of three), the light members' process, and its own copy of the owner table, which
says in advance which jobs a change moves to or from each full daemon."""

from __future__ import annotations

import contextlib
import json
import queue
import random
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tools.daemonproc import process_cpu_seconds
from tools.zkserver import ZkEnsemble, ZkServer
from zksched.core.members import Member
from zksched.core.owners import OwnerTable

# -- ZooKeeper -------------------------------------------------------------------------------


@dataclass
class Zookeeper:
    """The benchmark's own ZooKeeper: `standalone` (one server) or `ensemble` (three)."""

    kind: str
    servers: list[ZkServer]

    @property
    def connect(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    def cpu_seconds(self) -> float:
        return sum(process_cpu_seconds(s.process.pid) for s in self.servers if s.process)


@contextlib.contextmanager
def own_zookeeper(workdir: Path, kind: str) -> Iterator[Zookeeper]:
    if kind == "ensemble":
        servers = ZkEnsemble.create(workdir / "zk", size=3).servers
    else:
        servers = [ZkServer(workdir / "zk")]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_serving(120)
        yield Zookeeper(kind, servers)
    finally:
        for server in servers:
            server.stop(kill=True)


# -- the light members' process ---------------------------------------------------------------


class LightProcess:
    """`python -m tools.bench.light_members`, driven over its stdin and stdout."""

    def __init__(
        self, zk: str, client_id: str, count: int, log: Path, session_timeout: float
    ) -> None:
        with open(log, "wb") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tools.bench.light_members",
                    "--zk",
                    zk,
                    "--client-id",
                    client_id,
                    "--count",
                    str(count),
                    "--session-timeout",
                    str(session_timeout),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        self.log = log
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)

    def next_line(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer from the light members in {timeout:g} s") from None
        if line is None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the light members' process ended: {tail}")
        record: dict[str, Any] = json.loads(line)
        if record.get("event") == "error":
            raise RuntimeError(f"light members: {record['error']}")
        return record

    def ask(self, command: Mapping[str, Any], timeout: float = 60) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self.next_line(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.process.stdin.close()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


# -- the benchmark's own owner table --------------------------------------------------------


@dataclass(frozen=True)
class JobKey:
    """What the owner of a job depends on, as the daemons ask it (`OwnerTable.job_owner`)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    program: str = "true"


class OwnerModel:
    """The owner table the full daemons compute, computed here too: which jobs each change
    moves, to and from which member (so that the benchmark can pick changes that move jobs
    of every full daemon, and check what the daemons say they took and dropped)."""

    def __init__(self, members: Iterable[Member], jobs: Iterable[JobKey]) -> None:
        self.members = {m.member_id: m for m in members}
        self.jobs = list(jobs)
        self.table = OwnerTable(self.members.values())
        for job in self.jobs:
            self.owner(self.table, job)

    @staticmethod
    def owner(table: OwnerTable, job: JobKey) -> str | None:
        return table.owner(job.name, dict(job.labels), job.program)

    def add_jobs(self, jobs: Iterable[JobKey]) -> None:
        for job in jobs:
            self.jobs.append(job)
            self.owner(self.table, job)

    def owned(self, member_id: str) -> int:
        return sum(1 for job in self.jobs if self.owner(self.table, job) == member_id)

    def derive(self, members: Mapping[str, Member]) -> tuple[OwnerTable, dict[str, list[int]]]:
        """The table for `members` and, per member, [taken, dropped]."""
        table = self.table.with_members(members.values())
        moves: dict[str, list[int]] = {}
        keys = {job.name: job for job in self.jobs}
        for name in table.moved or ():
            old, new = self.owner(self.table, keys[name]), self.owner(table, keys[name])
            if new is not None:
                moves.setdefault(new, [0, 0])[0] += 1
            if old is not None:
                moves.setdefault(old, [0, 0])[1] += 1
        return table, moves

    def advance(self, members: Mapping[str, Member], table: OwnerTable) -> None:
        self.members = dict(members)
        self.table = table

    def choose(
        self,
        kind: str,
        candidates: list[str],
        full: list[str],
        rng: random.Random,
        tries: int = 16,
    ) -> tuple[str, OwnerTable, dict[str, list[int]]]:
        """A change (`join` of a new id or `leave` of a light member, from `candidates`)
        that moves jobs to or from as many full daemons as possible (each, if one of
        `tries` does): each daemon's `owned` event then marks when it settled."""
        best: tuple[int, str, OwnerTable, dict[str, list[int]]] | None = None
        for subject in rng.sample(candidates, min(tries, len(candidates))):
            members = dict(self.members)
            if kind == "join":
                members[subject] = Member(member_id=subject)
            else:
                del members[subject]
            table, moves = self.derive(members)
            hit = sum(1 for f in full if sum(moves.get(f, (0, 0))) > 0)
            if best is None or hit > best[0]:
                best = (hit, subject, table, moves)
            if hit == len(full):
                break
        assert best is not None
        return best[1], best[2], best[3]

    def with_change(self, kind: str, subject: str) -> dict[str, Member]:
        members = dict(self.members)
        if kind == "join":
            members[subject] = Member(member_id=subject)
        else:
            members.pop(subject)
        return members
