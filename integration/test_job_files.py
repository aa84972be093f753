"""`jobs apply` with several files against a real ZooKeeper: their jobs are one table,
applied at once; `--prune` deletes what none of them names."""

from __future__ import annotations

import json
from pathlib import Path

from integration.harness import run_cli


def job(name: str) -> str:
    return f'[jobs.{name}]\nschedule = "0 2 * * *"\ncommand = ["/bin/true"]\n'


def listed(zk: str, client_id: str) -> list[str]:
    done = run_cli(zk, client_id, "jobs", "list", "--json")
    assert done.returncode == 0, done.stderr
    return sorted(row["name"] for row in json.loads(done.stdout))


def test_several_files_are_applied_as_one_table(zk: str, client_id: str, tmp_path: Path) -> None:
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text(job("backup") + job("report"))
    b.write_text(job("billing"))
    done = run_cli(zk, client_id, "jobs", "apply", str(a), str(b))
    assert done.returncode == 0, done.stderr
    assert "3 created" in done.stdout
    assert listed(zk, client_id) == ["backup", "billing", "report"]

    # a job in two files changes nothing
    b.write_text(job("billing") + job("backup"))
    refused = run_cli(zk, client_id, "jobs", "apply", "--prune", str(a), str(b))
    assert refused.returncode == 2
    assert "defines it too" in refused.stderr
    assert listed(zk, client_id) == ["backup", "billing", "report"]

    # --prune keeps what any file names, deletes the rest
    b.write_text(job("billing"))
    a.write_text(job("backup"))
    pruned = run_cli(zk, client_id, "jobs", "apply", "--prune", str(a), str(b))
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted   report" in pruned.stdout
    assert listed(zk, client_id) == ["backup", "billing"]
