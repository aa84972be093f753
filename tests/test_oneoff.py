"""One-off jobs (`at = ...`, `@at <instant>`): the schedule, the job file, the fire core."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from zksched.cli.main import cli
from zksched.core.fire import model as m
from zksched.core.fire.job import JobFireMachine
from zksched.core.jobspec import JobSpec, JobSpecError, parse_job_file
from zksched.core.schedule import Schedule, ScheduleError

AT = datetime(2026, 12, 24, 17, 0, tzinfo=UTC)
T = AT.timestamp()


def test_the_schedule_fires_once_at_its_instant() -> None:
    schedule = Schedule.parse("@at 2026-12-24T18:00:00+01:00", "Europe/Berlin")
    assert schedule.expr == "@at 2026-12-24T17:00:00Z"
    assert schedule.next_fire(AT - timedelta(days=30)) == AT
    assert list(schedule.fires_between(AT - timedelta(days=1), AT + timedelta(days=1))) == [AT]
    assert schedule.latest_fire(AT - timedelta(seconds=1), AT) == AT
    assert schedule.latest_fire(AT, AT + timedelta(days=9)) is None
    with pytest.raises(ScheduleError):
        schedule.next_fire(AT)
    assert schedule.explain() == ["once, at 2026-12-24T18:00:00+01:00 (Europe/Berlin)"]
    assert Schedule.parse(schedule.expr, "Europe/Berlin") == schedule


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("@at 2026-12-24T18:00:00", "has no UTC offset"),
        ("@at 2026-12-24T18:00:00.250+01:00", "fraction of a second"),
        ("@at christmas", "is not an ISO 8601 time"),
        ("@at 0001-01-01T00:00:00Z", "out of range"),
        ("@at 0001-01-01T00:00:00+14:00", "out of range"),  # OverflowError in UTC
        ("@at 9999-12-31T23:59:59-05:00", "out of range"),
        ("@at 9500-01-01T00:00:00Z", "out of range"),  # no fire record could be named so
    ],
)
def test_a_bad_instant_is_refused_with_its_reason(text: str, says: str) -> None:
    with pytest.raises(ScheduleError, match=says):
        Schedule.parse(text)


def test_a_job_file_says_at_as_text_or_as_a_toml_date_time() -> None:
    jobs = parse_job_file(
        b'[jobs.a]\nat = "2026-12-24T18:00:00+01:00"\ncommand = ["x"]\n'
        b'[jobs.b]\nat = 2026-12-24T17:00:00Z\ncommand = ["x"]\ntimezone = "Europe/Berlin"\n',
        "f.toml",
    )
    assert jobs["a"].schedule == jobs["b"].schedule == "@at 2026-12-24T17:00:00Z"
    again = JobSpec.from_record(jobs["b"].to_record())
    assert again == jobs["b"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('at = "2026-12-24T18:00:00Z"\nschedule = "* * * * *"', "a schedule or an at"),
        ('at = "2026-12-24 18:00"', "has no UTC offset"),
        ("at = 5", "the time must be a string or a date-time"),
        ('at = "0001-01-01T00:00:00+14:00"', "out of range"),  # a traceback in `check`
        ("at = 0001-01-01T00:00:00+14:00", "out of range"),  # a TOML date-time
        ("", "or, to run it once, at ="),
    ],
)
def test_a_bad_at_is_refused_naming_the_field_and_line(body: str, says: str) -> None:
    with pytest.raises(JobSpecError) as refused:
        parse_job_file(f'[jobs.a]\ncommand = ["x"]\n{body}\n'.encode(), "f.toml")
    problems = [str(p) for p in refused.value.problems]
    assert len(problems) == 1 and says in problems[0], problems


def machine(catchup: str = "latest", window: float = 3600.0) -> JobFireMachine:
    spec = JobSpec(
        name="once",
        schedule="@at 2026-12-24T17:00:00Z",
        command=("x",),
        overlap="allow",
        catchup=catchup,
        catchup_window=window,
    )  # type: ignore[arg-type]
    return JobFireMachine(spec, T - 86_400, m.FireTunables())


def claims(actions: list[m.Action]) -> list[tuple[datetime, str]]:
    return [(a.instant, a.kind) for a in actions if isinstance(a, m.Claim)]


def test_the_fire_core_claims_it_once_at_its_instant_and_never_again() -> None:
    job = machine()
    out = job.set_session(1, T - 10) + job.set_owned(True, T - 10)
    assert not claims(out)
    assert claims(job.handle(m.Tick(), T)) == [(AT, "scheduled")]
    job.handle(m.ClaimAnswered(AT, m.ClaimOutcome.CREATED, 7), T)
    job.handle(m.Started(AT), T)
    job.handle(m.Exited(AT, "ok"), T + 1)
    job.handle(m.ResultWritten(AT), T + 1)
    assert not claims(job.handle(m.Tick(), T + 86_400 * 400))


@pytest.mark.parametrize(
    ("catchup", "late", "runs"),
    [("latest", 600, True), ("all", 600, True), ("none", 600, False), ("latest", 7200, False)],
)
def test_a_member_that_comes_after_its_instant_catches_it_up_by_policy_and_window(
    catchup: str, late: float, runs: bool
) -> None:
    job = machine(catchup)
    out = job.set_session(1, T + late) + job.set_owned(True, T + late)
    assert m.ReadHistory("once") in out
    out = job.handle(m.HistoryRead(()), T + late)
    assert claims(out) == ([(AT, "catchup")] if runs else [])
    if not runs:
        (record,) = [a for a in out if isinstance(a, m.RecordSkip)]
        assert record.instant == AT and record.reason is m.SkipReason.OUTSIDE_CATCHUP_WINDOW


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["+tomorrow", "j", "x"], "WHEN '+tomorrow'"),
        (["next week", "j", "x"], "is not +DURATION (+10m) or an ISO 8601 time"),
        (["2020-01-01T00:00:00Z", "j", "x"], "has passed"),
        (["+1m", "bad name!", "x"], "job name"),
        (["+1m", "--tz", "Mars/Base", "j", "x"], "--tz"),
    ],
)
def test_jobs_at_refuses_bad_input_before_touching_the_cluster(args: list[str], says: str) -> None:
    result = CliRunner().invoke(cli, ["--zk", "127.0.0.1:1", "jobs", "at", *args])
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_a_trigger_after_its_instant_runs_once_and_breaks_nothing() -> None:
    """`jobs trigger` on a one-off job that has run: its record goes under a second of its
    own, and planning over records after the instant (it fires no more) still works."""
    job = machine()
    later = T + 3600
    job.set_session(1, later)
    job.set_owned(True, later)
    job.handle(m.HistoryRead((AT,)), later)
    out = job.handle(m.Triggered("t-1"), later + 0.5)
    assert [(i, k) for i, k in claims(out)] == [(datetime.fromtimestamp(later, UTC), "trigger")]
    job.set_owned(False, later + 1)
    job.set_owned(True, later + 2)  # taken back: planned over the trigger's record
    job.handle(m.HistoryRead((AT, datetime.fromtimestamp(later, UTC))), later + 2)
