"""One-off jobs against a real ZooKeeper, from the CLI: `zksched jobs at WHEN NAME -- CMD`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from integration.harness import SESSION_TIMEOUT, DaemonProcess, run_cli, wait_until

Start = Callable[..., DaemonProcess]  # the `daemons` fixture


def at(zk: str, client_id: str, when: str, out: Path) -> None:
    record = f"echo $ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID >> {out}"
    done = run_cli(zk, client_id, "jobs", "at", when, "once", "--", "sh", "-c", record)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("once: runs once at "), done.stdout


def lines(out: Path) -> list[list[str]]:
    return [line.split() for line in out.read_text().splitlines()] if out.exists() else []


def test_a_one_off_whose_owner_dies_before_its_time_runs_once_on_another_member(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    first, second = daemons(), daemons()
    for daemon in (first, second):
        wait_until(lambda d=daemon: len(d.last_members() or []) == 2, 30, what="both joined")
    out = tmp_path / "ran"
    at(zk, client_id, "+8s", out)
    owners = json.loads(run_cli(zk, client_id, "owners", "--json").stdout)
    (owner,) = [row["owner"] for row in owners if row["name"] == "once"]
    victim, survivor = (first, second) if owner == first.member_id else (second, first)
    victim.kill()
    wait_until(lambda: lines(out), 8 + SESSION_TIMEOUT + 20, what="the one-off's run")
    time.sleep(2.0)  # a second run would show by now
    (ran,) = lines(out)
    assert ran[1] == survivor.member_id
    history = json.loads(run_cli(zk, client_id, "jobs", "history", "once", "--json").stdout)
    assert [h["state"] for h in history] == ["ok"]


def test_a_one_off_due_while_no_member_was_up_runs_once_when_one_joins(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    out = tmp_path / "ran"
    at(zk, client_id, "+2s", out)
    listed = run_cli(zk, client_id, "jobs", "list")
    assert "once" in listed.stdout and "@at " in listed.stdout
    time.sleep(3.5)  # its instant passes with nobody up
    daemons()
    wait_until(lambda: lines(out), 30, what="the one-off caught up")
    time.sleep(2.0)
    assert len(lines(out)) == 1
    history = json.loads(run_cli(zk, client_id, "jobs", "history", "once", "--json").stdout)
    assert [(h["state"], h["kind"]) for h in history] == [("ok", "catchup")]
    # it has run: no longer listed, unless asked for
    wait_until(
        lambda: "once" not in run_cli(zk, client_id, "jobs", "list").stdout,
        10,
        what="the one-off gone from jobs list",
    )
    assert "once" in run_cli(zk, client_id, "jobs", "list", "--all").stdout
    again = run_cli(zk, client_id, "jobs", "at", "+1h", "once", "--", "true")
    assert again.returncode == 2 and "exists already" in again.stderr
