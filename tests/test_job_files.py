"""Several job files as one table (`jobs apply a.toml b.toml`, `check a.toml b.toml`): a
table too large for one file is kept as several; each job belongs to one file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from zksched.cli.main import cli
from zksched.core.jobspec import MAX_FILE_BYTES, JobSpecError, load_job_file, load_job_files

NOWHERE = ["--zk", "127.0.0.1:1", "--connect-timeout", "0.1"]


def job(name: str, hour: int = 2) -> str:
    return f'[jobs.{name}]\nschedule = "0 {hour} * * *"\ncommand = ["/bin/true"]\n'


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_files_jobs_are_one_table(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", job("backup") + job("report", 3))
    b = write(tmp_path / "b.toml", '[defaults]\ntimezone = "Europe/Paris"\n' + job("billing"))
    jobs = load_job_files([a, b])
    assert sorted(jobs) == ["backup", "billing", "report"]
    # each file's [defaults] are its own
    assert jobs["billing"].timezone == "Europe/Paris"
    assert jobs["backup"].timezone == "UTC"
    assert jobs == {**load_job_file(a), **load_job_file(b)}


def test_a_job_in_two_files_is_refused_naming_both(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", job("backup"))
    b = write(tmp_path / "b.toml", job("backup", 4) + job("other"))
    with pytest.raises(JobSpecError) as caught:
        load_job_files([a, b])
    (problem,) = caught.value.problems
    assert problem.job == "backup"
    assert problem.source == str(b)
    assert str(a) in problem.message and "one file" in problem.message


def test_every_files_problems_are_listed(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", '[jobs.x]\nschedule = "nope"\ncommand = ["/bin/true"]\n')
    b = write(tmp_path / "b.toml", "[jobs.y]\ncommand = 3\n")
    with pytest.raises(JobSpecError) as caught:
        load_job_files([a, b, tmp_path / "missing.toml"])
    sources = {p.source for p in caught.value.problems}
    assert sources == {str(a), str(b), str(tmp_path / "missing.toml")}


def test_a_file_over_the_limit_says_to_split_it(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(JobSpecError, match="split the jobs across several files"):
        load_job_file(big)


def test_check_takes_several_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.toml", job("backup"))
    b = write(tmp_path / "b.toml", job("billing"))
    done = CliRunner().invoke(cli, ["check", str(a), str(b)])
    assert done.exit_code == 0, done.output
    assert "2 files: 2 jobs OK" in done.output
    clash = write(tmp_path / "c.toml", job("backup"))
    refused = CliRunner().invoke(cli, ["check", str(a), str(clash)])
    assert refused.exit_code == 2
    assert "defines it too" in refused.output
    assert "Traceback" not in refused.output
    mixed = CliRunner().invoke(cli, ["check", str(a), "-"], input=job("x"))
    assert mixed.exit_code == 2
    assert "standard input" in mixed.output


def test_apply_refuses_a_job_in_two_files_before_connecting(tmp_path: Path) -> None:
    """The ZooKeeper given does not exist: exit 2 (invalid), not 3 (unreachable)."""
    a = write(tmp_path / "a.toml", job("backup"))
    b = write(tmp_path / "b.toml", job("backup"))
    done = CliRunner().invoke(cli, [*NOWHERE, "jobs", "apply", str(a), str(b)])
    assert done.exit_code == 2, done.output
    assert "defines it too" in done.output
    assert "nothing was changed" in done.output
