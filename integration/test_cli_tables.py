"""Every CLI table against a real cluster speaks the operator's words (yes/no, `-` for none),
never Python's (`zksched jobs list` printed `PAUSED False`); `--json` keeps booleans and
nulls."""

from __future__ import annotations

import json
import re
from pathlib import Path

from integration.harness import member_with_jobs, run_cli, wait_until

JOBS = """
[jobs.tick]
schedule = "* * * * * *"
command = ["/bin/true"]
overlap = "allow"

[jobs.idle]
schedule = "0 3 * * *"
command = ["/bin/true"]
paused = true
"""

PYTHON = re.compile(r"\b(True|False|None)\b|\{\}|\[\]|\['")


def test_tables_say_yes_no_and_dash_and_json_keeps_booleans(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    member = member_with_jobs(zk, client_id, tmp_path, JOBS)
    try:
        wait_until(
            lambda: json.loads(run_cli(zk, client_id, "jobs", "history", "tick", "--json").stdout),
            30,
            what="a first run of tick",
        )
        listed = run_cli(zk, client_id, "jobs", "list")
        assert listed.returncode == 0, listed.stderr
        header, *body = listed.stdout.splitlines()
        column = header.index("PAUSED")  # columns are aligned: cells start under headers
        paused = {line.split()[0]: line[column:].split()[0] for line in body}
        assert paused == {"idle": "yes", "tick": "no"}, listed.stdout
        for command in (
            ("jobs", "list"),
            ("jobs", "show", "tick"),
            ("jobs", "show", "idle"),
            ("jobs", "history", "tick"),
            ("status",),
            ("members",),
            ("owners",),
        ):
            done = run_cli(zk, client_id, *command)
            assert done.returncode == 0, (command, done.stderr)
            assert not PYTHON.search(done.stdout), (command, done.stdout)
        shown = run_cli(zk, client_id, "jobs", "show", "idle").stdout
        assert re.search(r"^paused:\s+yes$", shown, re.M) and re.search(r"^env:\s+-$", shown, re.M)
        as_json = json.loads(run_cli(zk, client_id, "jobs", "list", "--json").stdout)
        by_name = {row["name"]: row for row in as_json}
        assert by_name["idle"]["paused"] is True and by_name["tick"]["paused"] is False
        assert by_name["idle"]["next_fire"] is None
    finally:
        member.stop()
