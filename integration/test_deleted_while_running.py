"""A job deleted while it runs: `jobs delete` removes its history, the running record too.
The run ends as it would have; its result has no record left to complete, and making the
record again would bring the deleted job's folder back. The member says so once and lets it
go (it used to retry the write every 2 s for as long as it ran, and kept the job's machine)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient

from integration.harness import DaemonProcess, run_cli, wait_until
from zksched.zk.paths import ClusterPaths


def test_a_result_whose_record_went_with_its_job_is_dropped_once(
    daemons: Callable[..., DaemonProcess],
    zk: str,
    client_id: str,
    tmp_path: Path,
    kazoo: KazooClient,
) -> None:
    started = tmp_path / "started"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        '[jobs.doomed]\nschedule = "0 0 1 1 *"\n'
        f'command = ["sh", "-c", "touch {started}; sleep 3"]\n'
    )
    daemon = daemons()
    wait_until(lambda: daemon.last_members(), 20, what="joined")
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    wait_until(lambda: daemon.events("owned"), 20, what="the job owned")
    assert run_cli(zk, client_id, "jobs", "trigger", "doomed").returncode == 0
    wait_until(started.exists, 20, what="the triggered run")
    assert run_cli(zk, client_id, "jobs", "delete", "doomed").returncode == 0
    wait_until(lambda: daemon.events("result-dropped"), 20, what="the result let go")
    time.sleep(5)  # two and a half rounds of the chores that retried it
    dropped = daemon.events("result-dropped")
    assert len(dropped) == 1 and dropped[0]["job"] == "doomed", dropped
    assert "could not record the result" not in daemon.log_text()
    folder = ClusterPaths(client_id).job_fires("doomed")
    assert kazoo.exists(folder) is None, "the deleted job's history was made again"
