"""`overlap = "skip"` against a real ZooKeeper: an instant due while the previous run holds
the job is skipped, never queued; and a daemon killed mid-run takes its command with it
before another member can start the job."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from integration.harness import SESSION_TIMEOUT, DaemonProcess, run_cli, wait_until
from zksched.core.firekey import fire_key, parse_fire_key

Start = Callable[..., DaemonProcess]  # the `daemons` fixture


def apply(zk: str, client_id: str, path: Path) -> None:
    done = run_cli(zk, client_id, "jobs", "apply", str(path))
    assert done.returncode == 0, done.stderr


SLOW = """[jobs.slow]
schedule = "* * * * * *"
command = ["sh", "-c", "echo $ZKSCHED_FIRE_KEY $(date +%s.%N) start >> {out}; \
sleep 2.5; echo $ZKSCHED_FIRE_KEY $(date +%s.%N) end >> {out}"]
overlap = "skip"
"""


def runs(out: Path) -> dict[datetime, tuple[float, float | None]]:
    """instant -> (started, ended) as the commands wrote them."""
    found: dict[datetime, list[float | None]] = {}
    if not out.exists():
        return {}
    for line in out.read_text().splitlines():
        key, ts, what = line.split()
        instant = parse_fire_key(key)[1]
        entry = found.setdefault(instant, [None, None])
        entry[0 if what == "start" else 1] = float(ts)
    return {i: (s or 0.0, e) for i, (s, e) in found.items()}


@pytest.mark.parametrize("order", ["job first", "daemon first"])
def test_a_job_longer_than_its_period_skips_and_never_falls_behind(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, order: str
) -> None:
    """The issue's reproduction: `sleep 2.5` every second. Job applied 3 s before the
    daemon starts (its first fire is a catch-up), or daemon first. Instants due while a run
    goes are skipped `still-running`; every scheduled instant is claimed before its successor
    is due and no run starts far behind (no backlog), and no two overlap."""
    out = tmp_path / "runs.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(SLOW.format(out=out))
    if order == "job first":
        apply(zk, client_id, jobfile)
        time.sleep(3)
        daemon = daemons()
    else:
        daemon = daemons()
        wait_until(lambda: daemon.last_members(), 20, what="joined")
        apply(zk, client_id, jobfile)
    wait_until(lambda: len([r for r in runs(out).values() if r[1]]) >= 3, 30, what="3 runs")
    seen = sorted(runs(out).items())
    history = run_cli(zk, client_id, "jobs", "history", "slow", "--json", "--limit", "100")
    records = {r["fire_key"]: r for r in json.loads(history.stdout)}
    for instant, (started, _) in seen:
        record = records[fire_key("slow", instant)]
        # the core's decision: a scheduled instant is claimed before its successor is due
        # (the catch-up's runs at once); the start follows at the machine's pace but never
        # piles up (the backlog grew 1.5 s a run: 0.5, 2.0, 3.5, 5.1 s late, ...)
        claimed = datetime.fromisoformat(record["claimed_at"]).timestamp()
        if record["kind"] == "scheduled":
            assert claimed - instant.timestamp() < 1.0, f"{instant} claimed late: {record}"
        assert started - instant.timestamp() < 2.0, f"{instant} started {started} (a backlog)"
    for (_, (_, ended)), (_, (started, _)) in itertools.pairwise(seen):
        assert ended is not None and ended <= started, "two runs of a skip job overlapped"
    skips = [e for e in daemon.events("skip") if e["reason"] == "still-running"]
    assert skips, "no still-running skip"
    assert '"still-running"' in history.stdout


def test_a_killed_daemon_takes_its_command_with_it_before_another_member_starts_the_job(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    """SIGKILL a daemon while its `overlap = "skip"` command runs: the command's process
    group is gone before the session can expire, so when another member takes the job
    over, the first run is not still going beside the new one."""
    pids = tmp_path / "pids"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        "[jobs.longer]\n"
        'schedule = "* * * * * *"\n'
        f"command = ['sh', '-c', 'echo $$ $ZKSCHED_MEMBER_ID >> {pids}; exec sleep 27.5']\n"
        'overlap = "skip"\n'
    )
    apply(zk, client_id, jobfile)
    first = daemons()
    wait_until(lambda: pids.exists() and pids.read_text().strip(), 20, what="the first run")
    pid = int(pids.read_text().split()[0])
    killed = first.kill()
    wait_until(lambda: not running(pid), SESSION_TIMEOUT, what="its command gone")
    gone = time.time()
    assert gone - killed < SESSION_TIMEOUT, "the command outlived its member's session"
    second = daemons()
    wait_until(lambda: len(pids.read_text().split()) >= 4, 30, what="the second member's run")
    assert pids.read_text().split()[3] == second.member_id
    assert not running(pid)


def running(pid: int) -> bool:
    """Whether the process lives: a zombie has ended (it waits for init, which on a busy
    machine, or in some containers, reaps orphans late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
