"""Celery beat on every replica (examples/celery_beat.py with ClusterScheduler), against a real
ZooKeeper: 3 `celery beat` processes with the memory broker, one SIGKILLed mid-run. Every
message published is counted by the example's before_task_publish handler: each due instant
of the every-second entry is sent once across the beats, none twice, none missing (but an
instant the killed beat had claimed and not sent: its record says so)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from integration.fires import name_instant_pid_lines
from integration.harness import HOSTNAME, run_cli, wait_until
from zksched.core.firekey import format_utc
from zksched.zk.claims import FireClaims
from zksched.zk.paths import ClusterPaths

ROOT = Path(__file__).resolve().parent.parent
BEATS = 3
WINDOW = 10  # seconds of due instants checked
WARM_UP = 2
ENTRY = "heartbeat"  # the example's every-second entry


sends = name_instant_pid_lines  # (entry, due instant, pid) a published message.


def beat(zk: str, client_id: str, sends_path: Path, out: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ZKSCHED_ZK": zk,
        "ZKSCHED_CLIENT_ID": client_id,
        "BEAT_SENDS": str(sends_path),
        "CELERY_BROKER_URL": "memory://",
    }
    with out.open("ab") as sink:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "examples.celery_beat",
                "beat",
                "-S",
                "zksched.integrations.celery:ClusterScheduler",
                "-l",
                "info",
                "--schedule",
                str(out.with_suffix(".schedule")),  # unused by ClusterScheduler: no shared file
            ],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.slow
def test_beat_on_three_replicas_sends_each_instant_once_through_a_kill(
    zk: str, client_id: str, kazoo: KazooClient, tmp_path: Path
) -> None:
    path = tmp_path / "sends.log"
    beats = [beat(zk, client_id, path, tmp_path / f"beat-{n}.out") for n in range(BEATS)]
    try:

        def joined() -> bool:
            done = run_cli(zk, client_id, "members", "--json")
            return done.returncode == 0 and len(json.loads(done.stdout)) == BEATS

        wait_until(joined, 60, 0.5, "the 3 beats joined")
        begin = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=WARM_UP)
        instants = [format_utc(begin + timedelta(seconds=s)) for s in range(WINDOW + 1)]

        def sent_through(instant: str) -> bool:
            return any(e == ENTRY and at >= instant for e, at, _ in sends(path))

        # SIGKILL the beat that sent the latest instant, in the middle of the window
        wait_until(lambda: sent_through(instants[WINDOW // 2]), 30, 0.2, "mid-window sends")
        victim_pid = max((at, pid) for e, at, pid in sends(path) if e == ENTRY)[1]
        victim = next(b for b in beats if b.pid == victim_pid)
        victim.kill()
        victim.wait()
        killed_at = datetime.now(UTC)

        claims = FireClaims(kazoo, ClusterPaths(client_id), 5.0)

        def abandoned(at: str) -> bool:
            """Claimed by the killed beat, never sent (at most once: lost, and recorded)."""
            record = claims.read(ENTRY, at)
            return (
                record is not None
                and record.member_id == f"{HOSTNAME}-{victim_pid}"
                and record.state == "running"
            )

        def complete() -> bool:
            seen = {at for e, at, _ in sends(path) if e == ENTRY}
            return all(at in seen or abandoned(at) for at in instants)

        wait_until(complete, WINDOW + 30, 0.5, "every due instant of the window sent")
    finally:
        for process in beats:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in beats:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    lines = [(at, pid) for e, at, pid in sends(path) if e == ENTRY]
    counts = collections.Counter(at for at, _ in lines)
    assert {at: n for at, n in counts.items() if n > 1} == {}, "an instant was sent twice"
    assert {pid for _, pid in lines} <= {b.pid for b in beats}
    lost = [at for at in instants if at not in counts]
    assert len(lost) <= 1, f"more than the killed beat's one in-flight instant lost: {lost}"
    # after the kill, the two beats left sent every instant between them
    after = [at for at in instants if at > format_utc(killed_at + timedelta(seconds=1))]
    assert after and all(at in counts for at in after)
    assert {pid for at, pid in lines if at in after} <= {b.pid for b in beats} - {victim_pid}
    # each send's record: ok, by the beat that sent it
    for at, pid in lines:
        if at in instants:
            record = claims_read(kazoo, client_id, at)
            assert record == ("ok", f"{HOSTNAME}-{pid}"), (at, record)
    by_pid = collections.Counter(pid for _, pid in lines)
    print(f"{len(lines)} sends by {len(by_pid)} beats: {dict(by_pid)}; lost: {lost}")


def claims_read(kazoo: KazooClient, client_id: str, at: str) -> tuple[str, str] | None:
    record = FireClaims(kazoo, ClusterPaths(client_id), 5.0).read(ENTRY, at)
    return None if record is None else (record.state, record.member_id)
