"""Retries (`retries = N`, `retry_backoff`) against a real ZooKeeper: a job that fails twice
and then passes runs three attempts of one fire (same fire key and fencing token,
`ZKSCHED_ATTEMPT` 1, 2, 3), with the backoff between them; its record notes each failed
attempt while it waits, history shows every attempt, and the metrics count the retries."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from integration.harness import DaemonProcess, run_cli, wait_until
from integration.test_http import metric, start_with_http
from zksched.core.retries import JITTER
from zksched.zk.paths import ClusterPaths

Start = Callable[..., DaemonProcess]


def flaky_job(tmp_path: Path, passes_at: int) -> tuple[str, Path]:
    """A job (run by trigger) that fails until its `passes_at`-th run; each run appends
    `<fire key> <attempt> <token> <start ts>` to the returned log."""
    count, log = tmp_path / "count", tmp_path / "attempts.log"
    script = (
        f"n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}; "
        f'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_ATTEMPT $ZKSCHED_FENCING_TOKEN $(date +%s.%N)" '
        f">> {log}; [ $n -ge {passes_at} ]"
    )
    text = (
        "[jobs.flaky]\n"
        'schedule = "0 0 1 1 *"\n'  # once a year: only the trigger runs it
        f"command = ['sh', '-c', '{script}']\n"
        "retries = 3\n"
        'retry_backoff = "1s"\n'
    )
    return text, log


def test_a_job_failing_twice_then_passing_runs_three_attempts_of_one_fire(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    daemon, base = start_with_http(daemons)
    wait_until(lambda: daemon.last_members(), 20, what="joined")
    text, log = flaky_job(tmp_path, passes_at=3)
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(text)
    result = run_cli(zk, client_id, "jobs", "apply", str(jobfile))
    assert result.returncode == 0, result.stderr
    result = run_cli(zk, client_id, "jobs", "trigger", "flaky")
    assert result.returncode == 0, result.stderr

    # While it backs off, its record stays `running` and notes the attempt to come.
    folder = ClusterPaths(client_id).job_fires("flaky")
    noted: set[int] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(lines(log)) < 3:
        for name in _children(kazoo, folder):
            record = json.loads(kazoo.get(f"{folder}/{name}")[0])
            if record["state"] == "running" and "attempts" in record:
                noted.add(record["attempt"])
        time.sleep(0.05)
    runs = lines(log)
    assert [r[1] for r in runs] == ["1", "2", "3"], runs
    assert len({r[0] for r in runs}) == 1 and len({r[2] for r in runs}) == 1, runs
    gaps = [float(b[3]) - float(a[3]) for a, b in itertools.pairwise(runs)]
    assert gaps[0] >= 1.0 * (1 - JITTER) and gaps[1] >= 2.0 * (1 - JITTER), gaps  # doubled
    assert noted & {2, 3}, "no failed attempt was noted in the record while it waited"

    record = wait_until(
        lambda: newest_record(zk, client_id, {"ok"}), 15, what="the fire's final record"
    )
    assert record["attempt"] == 3
    attempts = record["attempts"]
    assert [(a["attempt"], a["state"]) for a in attempts] == [(1, "failed"), (2, "failed")]
    assert all(a["exit_code"] == 1 and a["retry_at"] for a in attempts)
    shown = run_cli(zk, client_id, "jobs", "history", "flaky").stdout
    assert "attempt 3" in shown, shown

    wait_until(
        lambda: metric(base, "zksched_fire_retries_total", job="flaky") == 2,
        10,
        what="retries counted",
    )
    assert metric(base, "zksched_fires_total", job="flaky", outcome="failed") == 2
    assert metric(base, "zksched_fires_total", job="flaky", outcome="ok") == 1


def test_a_job_that_keeps_failing_stops_after_its_retries(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    daemon = daemons()
    wait_until(lambda: daemon.last_members(), 20, what="joined")
    text, log = flaky_job(tmp_path, passes_at=99)
    (tmp_path / "jobs.toml").write_text(text.replace("retries = 3", "retries = 1"))
    assert run_cli(zk, client_id, "jobs", "apply", str(tmp_path / "jobs.toml")).returncode == 0
    assert run_cli(zk, client_id, "jobs", "trigger", "flaky").returncode == 0

    record = wait_until(
        lambda: newest_record(zk, client_id, {"failed", "timeout"}),
        20,
        what="the fire's final record",
    )
    assert record["state"] == "failed" and record["attempt"] == 2
    time.sleep(3.0)  # a third attempt would have started by now (backoff 2 s x 1.2)
    assert [r[1] for r in lines(log)] == ["1", "2"]


def newest_record(zk: str, client_id: str, states: set[str]) -> dict[str, Any] | None:
    """The flaky job's newest fire record, once it is in one of `states`."""
    result = run_cli(zk, client_id, "jobs", "history", "flaky", "--json")
    rows = json.loads(result.stdout) if result.returncode == 0 else []
    return rows[0] if rows and rows[0]["state"] in states else None


def lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def _children(kazoo: KazooClient, folder: str) -> list[str]:
    try:
        return kazoo.get_children(folder)
    except NoNodeError:
        return []
