"""One-off function jobs: `cron(at=...)` as a job file's `at`, and a time that has passed
treated as a job file treats it (accepted, with a warning that says what becomes of it)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from zksched import Cluster, Fire, JobDefinitionError
from zksched.cli.main import cli
from zksched.core.jobspec import parse_job_file
from zksched.core.jobspec.passed import passed_note


def cluster() -> Cluster:
    return Cluster("127.0.0.1:2181", "billing")


def greet(fire: Fire) -> None:
    pass


def test_at_is_taken_as_in_a_job_file() -> None:
    """`cron(None, at=...)` was refused: "at: unknown key"."""
    berlin = timezone(timedelta(hours=1))
    specs = [
        cluster().add_job(greet, None, at="2030-12-24T18:00:00+01:00"),
        cluster().add_job(greet, at=datetime(2030, 12, 24, 18, 0, tzinfo=berlin)),
        cluster().add_job(greet, "@at 2030-12-24T17:00:00Z"),
    ]
    (file_spec,) = parse_job_file(
        b'[jobs.greet]\nat = "2030-12-24T18:00:00+01:00"\ncommand = ["/bin/true"]\n'
    ).values()
    assert {spec.schedule for spec in specs} == {file_spec.schedule}
    assert specs[0].schedule == "@at 2030-12-24T17:00:00Z"

    app = cluster()

    @app.cron(at="2030-12-24T17:00:00Z", timeout="5m")
    def send_greetings(fire: Fire) -> None:
        pass

    assert app.jobs["send_greetings"].schedule == "@at 2030-12-24T17:00:00Z"


@pytest.mark.parametrize(
    ("schedule", "at", "said"),
    [
        ("0 2 * * *", "2030-12-24T17:00:00Z", r"at: a job has a schedule or an at \(run once"),
        (None, "2030-12-24T18:00:00", "at: 2030-12-24T18:00:00 has no UTC offset"),
        (None, datetime(2030, 12, 24, 18, 0), "has no UTC offset"),
        (None, None, "schedule: missing: give a cron schedule"),
    ],
)
def test_schedule_and_at_go_one_at_a_time(schedule: str | None, at: object, said: str) -> None:
    app = cluster()
    with pytest.raises(JobDefinitionError, match=said):
        app.add_job(greet, schedule, at=at)  # type: ignore[arg-type]
    assert app.jobs == {}


def test_a_time_that_has_passed_is_registered_with_the_job_file_s_warning(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """An `@at` in the past was accepted silently; a job file's too. Both are accepted (an
    app restarted after its one-off ran registers it again) and both say what happens."""
    caplog.set_level(logging.WARNING, logger="zksched.app")
    app = cluster()
    spec = app.add_job(greet, at="2020-01-01T00:00:00Z")
    assert app.jobs["greet"] == spec
    said = [r.getMessage() for r in caplog.records if r.name == "zksched.app"]
    note = passed_note(spec, datetime.now(UTC))
    assert note is not None and said == [f"function job greet: at {note}"]
    assert "2020-01-01T00:00:00Z has passed" in note and "will not run" in note

    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[jobs.greet]\nat = "2020-01-01T00:00:00Z"\ncommand = ["/bin/true"]\n')
    checked = CliRunner().invoke(cli, ["check", str(jobs)])
    assert checked.exit_code == 0
    assert f"warning: job 'greet', field 'at': {note}" in checked.stderr


def test_a_time_just_passed_runs_late_within_the_catchup_window() -> None:
    now = datetime.now(UTC)
    app = cluster()
    spec = app.add_job(greet, at=(now - timedelta(minutes=5)).replace(microsecond=0))
    note = passed_note(spec, now)
    assert note is not None and "it runs late, once" in note
    ahead = app.add_job(greet, at=(now + timedelta(days=1)).replace(microsecond=0), name="later")
    assert passed_note(ahead, now) is None
