"""`zksched check` and `zksched next` through click, as an operator runs them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zksched.cli.main import cli

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "jobs.toml"
GOOD_JOB = '[jobs.j]\nschedule = "0 2 * * *"\ncommand = ["/bin/true"]\n'


def run(*args: str, stdin: str | bytes | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), input=stdin, catch_exceptions=True)
    # an expected failure is a clean exit, never an exception escaping click
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def check_file(tmp_path: Path, text: str | bytes) -> Result:
    path = tmp_path / "jobs.toml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return run("check", str(path))


# -- check -------------------------------------------------------------------------------------


def test_check_accepts_the_spec_example() -> None:
    result = run("check", str(EXAMPLE))
    assert result.exit_code == 0
    assert result.stdout == f"{EXAMPLE}: 1 job OK\n"


def test_check_counts_jobs(tmp_path: Path) -> None:
    text = GOOD_JOB + GOOD_JOB.replace("jobs.j", "jobs.k") + GOOD_JOB.replace("jobs.j", "jobs.l")
    result = check_file(tmp_path, text)
    assert (result.exit_code, result.stdout.split(": ")[1]) == (0, "3 jobs OK\n")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('schedule = "0 25 * * *"', "job 'j', field 'schedule': hour field '25'"),
        (
            'timezone = "Europe/Berln"',
            "job 'j', field 'timezone': unknown time zone 'Europe/Berln'",
        ),
        ('timeout = "1 hour"', "job 'j', field 'timeout': invalid duration '1 hour'"),
        ('jitter = "-5s"', "job 'j', field 'jitter': invalid duration"),
        ('overlap = "queue"', "job 'j', field 'overlap': overlap must be one of skip, allow"),
        ('catchup = "most"', "job 'j', field 'catchup': catchup must be one of latest, all, none"),
        ('timezon = "UTC"', "job 'j', field 'timezon': unknown key"),
    ],
)
def test_check_refuses_bad_fields(tmp_path: Path, body: str, expected: str) -> None:
    key = body.split(" = ")[0]
    lines = [line for line in GOOD_JOB.splitlines() if not line.startswith(f"{key} =")]
    if len(lines) < 3:
        lines.insert(1, "# (replaced)")
    result = check_file(tmp_path, "\n".join([*lines, body, ""]))
    assert result.exit_code == 2
    assert f"jobs.toml:4: {expected}" in result.stderr
    assert result.stderr.strip().endswith("jobs.toml: 1 problem found")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../etc", "job '../etc': job name '../etc' is not allowed"),
        ("a/b", "job 'a/b': job name 'a/b' is not allowed"),
        ("", "job '': job name must not be empty"),
        ("n" * 129, "job name is 129 characters long; the limit is 128"),
    ],
)
def test_check_refuses_bad_names(tmp_path: Path, name: str, expected: str) -> None:
    result = check_file(tmp_path, GOOD_JOB.replace("jobs.j", f'jobs."{name}"'))
    assert result.exit_code == 2
    assert "jobs.toml:1: " in result.stderr
    assert expected in result.stderr


def test_check_refuses_a_missing_command(tmp_path: Path) -> None:
    result = check_file(tmp_path, '[jobs.j]\nschedule = "@daily"\n')
    assert result.exit_code == 2
    assert "jobs.toml:1: job 'j', field 'command': missing" in result.stderr


def test_check_refuses_toml_syntax_errors_with_the_line(tmp_path: Path) -> None:
    result = check_file(tmp_path, GOOD_JOB + "paused = maybe\n")
    assert result.exit_code == 2
    assert "jobs.toml:4: invalid TOML: Invalid value (column 10)" in result.stderr


def test_check_lists_every_problem(tmp_path: Path) -> None:
    text = (
        '[jobs.a]\nschedule = "bad"\ncommand = ["/bin/true"]\ntimezone = "Nowhere"\n'
        '[jobs."b/c"]\nschedule = "@daily"\n'
    )
    result = check_file(tmp_path, text)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 5
    assert lines[0].startswith(f"{tmp_path / 'jobs.toml'}:2: job 'a', field 'schedule'")
    assert lines[1].startswith(f"{tmp_path / 'jobs.toml'}:4: job 'a', field 'timezone'")
    assert "job 'b/c'" in lines[2] and "job 'b/c', field 'command': missing" in lines[3]
    assert lines[4] == f"zksched: {tmp_path / 'jobs.toml'}: 4 problems found"


def test_check_unreadable_file(tmp_path: Path) -> None:
    result = run("check", str(tmp_path / "nope.toml"))
    assert result.exit_code == 2
    assert "cannot read the file: No such file or directory" in result.stderr


def test_check_reads_standard_input() -> None:
    assert run("check", "-", stdin=GOOD_JOB).stdout == "<stdin>: 1 job OK\n"
    result = run("check", "-", stdin="[jobs.x]\n")
    assert result.exit_code == 2
    assert result.stderr.startswith("<stdin>:1: job 'x', field 'schedule': missing")


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200),
        st.lists(
            st.sampled_from(
                [
                    "[jobs.a]",
                    '[jobs."../x"]',
                    'schedule = "@daily"',
                    'command = ["/bin/true"]',
                    'env = { A = "\\u0000" }',
                    "history = 1e400",
                    'x = "\\u202e"',
                    "[defaults]",
                    'timezone = "Europe/Berlin\\u0000"',
                    "= =",
                    '"\U0001f600" = 1',
                    "[[jobs]]",
                ]
            ),
            max_size=8,
        ).map("\n".join),
    )
)
def test_check_never_crashes(text: str | bytes) -> None:
    result = run("check", "-", stdin=text)
    assert result.exit_code in (0, 2)
    if result.exit_code == 2:
        assert result.stderr.strip().splitlines()[-1].startswith("zksched: <stdin>: ")


# -- next --------------------------------------------------------------------------------------


def test_next_berlin_spring_forward() -> None:
    result = run(
        "next",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-03-28T12:00:00+01:00",
        "--count",
        "2",
    )
    assert result.exit_code == 0
    assert result.stdout == "2026-03-29T03:00:00+02:00\n2026-03-30T02:30:00+02:00\n"


def test_next_berlin_fall_back_json() -> None:
    result = run(
        "next",
        "0 * * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-10-24T23:30:00Z",
        "-n",
        "3",
        "--json",
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout) == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_next_naive_after_is_read_in_the_zone() -> None:
    result = run(
        "next", "@hourly", "--tz", "America/New_York", "--after", "2026-07-01T10:00", "-n", "1"
    )
    assert result.stdout == "2026-07-01T11:00:00-04:00\n"


def test_next_accepts_unquoted_fields_and_six_fields() -> None:
    result = run(
        "next", "*/20", "*", "*", "*", "*", "*", "--after", "2026-01-01T00:00:00Z", "-n", "2"
    )
    assert result.stdout == "2026-01-01T00:00:20+00:00\n2026-01-01T00:00:40+00:00\n"


def test_next_defaults_to_five_instants_after_now() -> None:
    before = datetime.now(UTC)
    result = run("next", "* * * * *")
    instants = [datetime.fromisoformat(line) for line in result.stdout.splitlines()]
    assert len(instants) == 5
    assert before < instants[0] <= before + timedelta(minutes=1)
    assert all(t.utcoffset() == timedelta(0) for t in instants)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["61 * * * *"], "minute field '61'"),
        (["@reboot"], "unknown macro"),
        (["@daily", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (["@daily", "--after", "tomorrow"], "is not an ISO 8601 time"),
        (["@daily", "--after", "2026-13-01"], "is not an ISO 8601 time"),
        (["@daily", "--after", "0001-01-01T00:00:00Z"], "supported range"),
        (["@yearly", "--after", "9998-06-01T00:00:00Z"], "does not fire after"),
        (["@daily", "--count", "0"], "Invalid value for '--count'"),
    ],
)
def test_next_refuses_bad_input(args: list[str], message: str) -> None:
    result = run("next", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""
    if "--count" not in args:
        assert len(result.stderr.strip().splitlines()) == 1


def test_check_and_next_explain_the_month_dependent_day_forms(tmp_path: Path) -> None:
    body = '[jobs.close]\nschedule = "0 18 LW * *"\ncommand = ["/bin/true"]\n'
    result = check_file(tmp_path, body)
    assert result.exit_code == 0
    assert "  close: LW: the last weekday (Monday to Friday) of the month\n" in result.stdout
    result = run("next", "0 0 * * fri#2", "--after", "2026-01-01T00:00:00Z", "-n", "1")
    assert result.exit_code == 0
    assert result.stdout == "2026-01-09T00:00:00+00:00\n"  # the instants alone on stdout
    assert "# 5#2: the second Friday of the month" in result.stderr
    result = run("next", "0 0 * * 5#6")
    assert result.exit_code == 2
    assert "the number after # must be 1-5" in result.stderr
