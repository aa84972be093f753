"""The APScheduler example (examples/apscheduler_gunicorn.py) as 4 gunicorn workers against a
real ZooKeeper: every worker's scheduler fires every job, and each run time of each job runs
in one worker only, none missing, with its result recorded in the claim's fire record."""

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
WORKERS = 4
WINDOW = 10  # seconds of run times checked, after the warm-up
WARM_UP = 2


runs = name_instant_pid_lines  # (job id, scheduled UTC instant, pid) per run


def seconds(begin: datetime, end: datetime, step: int = 1) -> list[str]:
    """Every UTC instant t in [begin, end] with epoch seconds divisible by `step`."""
    first = int(begin.timestamp()) + (-int(begin.timestamp())) % step
    last = int(end.timestamp())
    return [format_utc(datetime.fromtimestamp(t, UTC)) for t in range(first, last + 1, step)]


@pytest.mark.slow
def test_four_gunicorn_workers_run_each_apscheduler_run_time_once(
    zk: str, client_id: str, kazoo: KazooClient, tmp_path: Path
) -> None:
    log_path = tmp_path / "runs.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ZKSCHED_ZK": zk,
        "ZKSCHED_CLIENT_ID": client_id,
        "APS_RUNS": str(log_path),
    }
    out = (tmp_path / "gunicorn.out").open("ab")
    gunicorn = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            str(WORKERS),
            "-b",
            "127.0.0.1:0",
            "--no-control-socket",  # its default path is one per user: tests run side by side
            "-c",
            "python:examples.apscheduler_gunicorn",
            "examples.apscheduler_gunicorn:app",
        ],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:

        def members() -> list[dict[str, object]]:
            done = run_cli(zk, client_id, "members", "--json")
            return json.loads(done.stdout) if done.returncode == 0 else []

        def all_joined() -> list[dict[str, object]]:
            found = members()
            return found if len(found) == WORKERS else []

        joined = wait_until(all_joined, 60, 0.5, "the 4 workers joined")
        pids = {int(str(m["pid"])) for m in joined}
        wait_until(lambda: runs(log_path), 30, what="a first run")
        begin = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=WARM_UP)
        end = begin + timedelta(seconds=WINDOW)
        ticks = seconds(begin, end)
        every_3s = seconds(begin, end, 3)

        def complete() -> bool:
            seen = {(job, at) for job, at, _ in runs(log_path)}
            return all(("tick", t) in seen for t in ticks) and all(
                ("every-3s", t) in seen for t in every_3s
            )

        # bounded: the window's last run time plus time for a loaded machine to run it
        wait_until(complete, WARM_UP + WINDOW + 30, 0.5, "every run time of the window")
    finally:
        gunicorn.send_signal(signal.SIGTERM)  # graceful: workers shut their schedulers down
        try:
            gunicorn.wait(30)
        finally:
            if gunicorn.poll() is None:
                gunicorn.kill()
                gunicorn.wait()
            out.close()

    lines = runs(log_path)
    counts = collections.Counter((job, at) for job, at, _ in lines)
    assert {k: n for k, n in counts.items() if n > 1} == {}, "a run time ran twice"
    assert {pid for _, _, pid in lines} <= pids  # only the workers ran anything
    by_pid = collections.Counter(pid for _, _, pid in lines)
    print(f"{len(lines)} runs by {len(by_pid)} workers: {dict(by_pid)}")

    # each run's end is in its claim's fire record: ok, by the worker that ran it
    claims = FireClaims(kazoo, ClusterPaths(client_id), 5.0)
    ran_by = {(job, at): pid for job, at, pid in lines}
    for job, instants in (("tick", ticks), ("every-3s", every_3s)):
        for at in instants:
            record = claims.read(job, at)
            assert record is not None, f"no fire record for {job}@{at}"
            assert record.state == "ok", (job, at, record)
            assert record.member_id == f"{HOSTNAME}-{ran_by[(job, at)]}"
    # the names are not jobs of the table: history refuses them, and shows them as claims
    refused = run_cli(zk, client_id, "jobs", "history", "tick")
    assert refused.returncode == 2 and "--claims" in refused.stderr, refused.stderr
    shown = run_cli(zk, client_id, "jobs", "history", "--claims", "tick", "--limit=100", "--json")
    assert shown.returncode == 0, shown.stderr
    by_instant = {row["scheduled"]: row for row in json.loads(shown.stdout)}
    for at in ticks:
        assert by_instant[at]["state"] == "ok", by_instant.get(at)
        assert by_instant[at]["member_id"] == f"{HOSTNAME}-{ran_by[('tick', at)]}"
