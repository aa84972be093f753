"""Many light members in one process, for the `members` benchmark (tools/bench/members.py).

`python -m tools.bench.light_members --zk HOSTS --client-id ID --count N` starts N members
that each hold a ZooKeeper session of their own, register a valid member record (an
ephemeral sequential znode under the cluster's members folder, made by the daemon's own
`MemberRegistration`) and watch the members folder, reading it again (the daemon's own
`MemberReader`: the listing, and the record of each new node) after every notification, as
a daemon's coordinator does. They compute no owner table and run nothing: the jobs the full
daemons' tables give them just never fire (the benchmark's jobs are not due while it runs).

All the clients share one kazoo handler (one completion and one watch thread for all, each
client keeping its own connection thread), and a few reader threads do every member's reads:
300 clients with a handler each would be 900 threads. What a real host would do alone,
they do here one after the other: the time for *every* light member to have read a change
is therefore an upper bound of what 300 hosts would take.

It talks JSON lines: commands on stdin, one answer each on stdout.

    {"cmd": "join", "member_id": ID}   a new member: {"event": "joined", "znode", "sent", "done"}
    {"cmd": "leave", "member_id": ID}  closes that member's session (its znode goes with it):
                                       {"event": "left", "sent", "done"}
    {"cmd": "stats"}                   {"event": "stats", ...}: requests sent, by type; watch
                                       notifications; reads; session troubles; CPU; RSS;
                                       per change: when the first and the last light member
                                       had read it
    {"cmd": "quit"}                    closes every session and exits

Its first line is {"event": "ready", "members": [...]} once every member is registered and
has read a listing with all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from tools.bench.zk_requests import RequestCounter
from zksched._version import __version__
from zksched.core.members import Member
from zksched.zk.connection import ensure_paths, handshake_for
from zksched.zk.handler import PollingHandler
from zksched.zk.membership import MemberReader, MemberRegistration, MemberSnapshot
from zksched.zk.paths import ClusterPaths

READERS = 8  # threads doing the members' reads


class SharedHandler(PollingHandler):
    """One handler for every client: kazoo stops a client's handler on every (re)connect and
    on stop(), which must not stop it for the others. `shutdown()` stops it for real."""

    def stop(self) -> None:
        pass

    def shutdown(self) -> None:
        super().stop()


@dataclass
class Change:
    """One join or leave made here, and when the light members had read it."""

    kind: str  # "join" or "leave"
    member_id: str
    sent: float
    done: float = 0.0
    expect: int = 0  # light members that must read it (those alive once it is done)
    readers: dict[str, float] = field(default_factory=dict)  # member -> when it read it
    first_notice: float | None = None  # the first watch notification after it was sent

    def reflected(self, ids: frozenset[str]) -> bool:
        return (self.member_id in ids) == (self.kind == "join")

    def summary(self) -> dict[str, Any]:
        times = sorted(self.readers.values())
        return {
            "kind": self.kind,
            "member_id": self.member_id,
            "sent": self.sent,
            "done": self.done,
            "first_notice": self.first_notice,
            "first_read": times[0] if times else None,
            # when every light member alive after it had read it
            "last_read": times[-1] if self.expect and len(times) >= self.expect else None,
            "read_by": len(times),
            "expect": self.expect,
        }


class LightMember:
    def __init__(self, swarm: Swarm, member_id: str) -> None:
        self.swarm = swarm
        self.member_id = member_id
        self.client = KazooClient(
            hosts=swarm.hosts,
            timeout=swarm.session_timeout,
            read_only=False,
            handler=swarm.handler,
        )
        swarm.counter.attach(self.client)
        self.client.add_listener(self._on_state)
        member = Member(
            member_id=member_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            version=__version__,
        )
        timeout = max(1.0, swarm.session_timeout / 3)
        self.registration = MemberRegistration(self.client, swarm.paths, member, timeout)
        self.reader = MemberReader(self.client, swarm.paths, timeout)
        self.ids: frozenset[str] = frozenset()
        self.closed = False

    def _on_state(self, state: KazooState) -> None:
        if not self.closed:
            self.swarm.count(f"session {state.lower()}")

    def on_members_changed(self, _event: Any) -> None:
        """kazoo's watch thread: count, and ask for a read (never block here)."""
        self.swarm.notified(self)

    def read(self) -> None:
        snapshot = self.reader.read(self.on_members_changed)
        self.ids = frozenset(m.member_id for m in snapshot.members)
        self.swarm.was_read(self)

    def register(self) -> None:
        self.registration.ensure(MemberSnapshot(()))  # a new session: no node of ours yet

    def close(self) -> None:
        self.closed = True
        self.client.stop()
        self.client.close()


class Swarm:
    def __init__(self, hosts: str, client_id: str, session_timeout: float) -> None:
        self.hosts = hosts
        self.paths = ClusterPaths(client_id)
        self.session_timeout = session_timeout
        self.handler = SharedHandler(handshake=handshake_for(session_timeout))
        self.counter = RequestCounter()
        self.counter.enabled = True
        self.members: dict[str, LightMember] = {}
        self.changes: list[Change] = []
        self.counts: Counter[str] = Counter()
        self._mutex = threading.Lock()
        self._queued: set[str] = set()
        self._work: queue.SimpleQueue[LightMember | None] = queue.SimpleQueue()
        self._readers = [
            threading.Thread(target=self._read_loop, name=f"reader-{i}", daemon=True)
            for i in range(READERS)
        ]
        for thread in self._readers:
            thread.start()

    def count(self, what: str, n: int = 1) -> None:
        with self._mutex:
            self.counts[what] += n

    # -- watches and reads ----------------------------------------------------------------

    def notified(self, member: LightMember) -> None:
        now = time.time()
        with self._mutex:
            self.counts["watch notifications"] += 1
            for change in self.changes:
                if change.first_notice is None and now >= change.sent:
                    change.first_notice = now
        self.want_read(member)

    def want_read(self, member: LightMember) -> None:
        with self._mutex:
            if member.member_id in self._queued:
                return  # a read is already due: it will see this change too
            self._queued.add(member.member_id)
        self._work.put(member)

    def _read_loop(self) -> None:
        while True:
            member = self._work.get()
            if member is None:
                return
            with self._mutex:
                self._queued.discard(member.member_id)
            if member.closed:
                continue
            try:
                member.read()
            except (KazooException, KazooTimeoutError) as exc:
                self.count(f"read failed: {type(exc).__name__}")
                if not member.closed:
                    time.sleep(0.2)
                    self.want_read(member)

    def was_read(self, member: LightMember) -> None:
        now = time.time()
        with self._mutex:
            self.counts["reads"] += 1
            for change in self.changes:
                if member.member_id in change.readers or not change.reflected(member.ids):
                    continue
                change.readers[member.member_id] = now

    # -- joining and leaving --------------------------------------------------------------

    def start(self, member_ids: list[str]) -> None:
        """Start and register every member, then let each read the folder once."""
        for member_id in member_ids:
            self.members[member_id] = LightMember(self, member_id)
        first = self.members[member_ids[0]].client
        first.start(60)
        ensure_paths(first, [self.paths.members], 30)
        pending = {m.member_id: m.client.start_async() for m in self.members.values()}
        for member_id, started in pending.items():
            started.wait(60)
            if not self.members[member_id].client.connected:
                raise RuntimeError(f"light member {member_id} could not connect")
        for member in self.members.values():
            member.register()
        for member in self.members.values():
            self.want_read(member)
        deadline = time.monotonic() + 600
        everyone = frozenset(self.members)
        while not all(everyone <= m.ids for m in self.members.values()):
            if time.monotonic() > deadline:
                raise RuntimeError("light members did not all read each other in 600 s")
            time.sleep(0.05)

    def join(self, member_id: str) -> dict[str, Any]:
        if member_id in self.members:
            raise ValueError(f"{member_id} is already a member here")
        member = LightMember(self, member_id)
        member.client.start(30)
        change = Change("join", member_id, sent=time.time())
        with self._mutex:
            self.changes.append(change)
        member.register()
        with self._mutex:
            change.done = time.time()
            self.members[member_id] = member
            change.expect = len(self.members)
        self.want_read(member)
        return {"event": "joined", "znode": member.registration.znode, **change.summary()}

    def leave(self, member_id: str) -> dict[str, Any]:
        member = self.members[member_id]
        change = Change("leave", member_id, sent=time.time())
        with self._mutex:
            self.changes.append(change)
            del self.members[member_id]
            change.expect = len(self.members)
        member.close()
        with self._mutex:
            change.done = time.time()
        return {"event": "left", **change.summary()}

    def stats(self) -> dict[str, Any]:
        with self._mutex:
            return {
                "event": "stats",
                "ts": time.time(),
                "members": len(self.members),
                "requests": dict(self.counter.counts),
                "counts": dict(self.counts),
                "changes": [c.summary() for c in self.changes],
                "cpu_s": _cpu_seconds(),
                "rss_mb": _rss_mb(),
                "threads": threading.active_count(),
            }

    def close(self) -> None:
        for member in list(self.members.values()):
            member.closed = True
            try:
                member.client.stop()
                member.client.close()
            except Exception:  # closing anyway
                pass
        for _ in self._readers:
            self._work.put(None)
        self.handler.shutdown()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _say(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.light_members")
    parser.add_argument("--zk", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--prefix", default="light")
    parser.add_argument("--session-timeout", type=float, default=10.0)
    args = parser.parse_args(argv)
    swarm = Swarm(args.zk, args.client_id, args.session_timeout)
    ids = [f"{args.prefix}-{i:04d}" for i in range(args.count)]
    started = time.monotonic()
    try:
        swarm.start(ids)
        _say({"event": "ready", "members": ids, "startup_s": time.monotonic() - started})
        for line in sys.stdin:
            command = json.loads(line)
            what = command.get("cmd")
            try:
                if what == "join":
                    _say(swarm.join(command["member_id"]))
                elif what == "leave":
                    _say(swarm.leave(command["member_id"]))
                elif what == "stats":
                    _say(swarm.stats())
                elif what == "quit":
                    break
                else:
                    _say({"event": "error", "error": f"unknown command {what!r}"})
            except Exception as exc:  # say it, and go on with the next command
                _say({"event": "error", "error": f"{type(exc).__name__}: {exc}"})
    finally:
        swarm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
