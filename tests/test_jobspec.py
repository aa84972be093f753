"""Job files and job records: every key, every refusal, and no traceback for any input."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zksched.core.jobspec import (
    JOB_KEYS,
    MAX_FILE_BYTES,
    FrozenMap,
    JobSpec,
    JobSpecError,
    SpecProblem,
    canonical_json,
    load_job_file,
    parse_job_file,
)
from zksched.core.schedule import Schedule

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "jobs.toml"

MINIMAL = """
[jobs.j]
schedule = "0 2 * * *"
command = ["/bin/true"]
"""


def problems_of(text: str | bytes) -> list[SpecProblem]:
    with pytest.raises(JobSpecError) as caught:
        parse_job_file(text, "jobs.toml")
    assert caught.value.problems
    return caught.value.problems


def only_problem(text: str) -> SpecProblem:
    problems = problems_of(text)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


# -- the SPEC's example -----------------------------------------------------------------------


def test_spec_example_file() -> None:
    jobs = load_job_file(EXAMPLE)
    assert list(jobs) == ["nightly-backup"]
    job = jobs["nightly-backup"]
    assert job == JobSpec(
        name="nightly-backup",
        schedule="0 2 * * *",
        command=("/usr/local/bin/backup", "--full"),
        timezone="Europe/Berlin",
        timeout=3600.0,
        jitter=30.0,
        overlap="skip",
        catchup="latest",
        catchup_window=3600.0,
        labels={"role": "db"},
        env={"BACKUP_LEVEL": "full"},
        history=20,
        paused=False,
    )
    assert job.schedule_obj == Schedule.parse("0 2 * * *", "Europe/Berlin")
    assert job.schedule_obj.next_fire(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 1, 1, 1, 0, tzinfo=UTC
    )


def test_canonical_record_and_hash() -> None:
    job = load_job_file(EXAMPLE)["nightly-backup"]
    record = job.to_record()
    assert record == {
        "format": 1,
        "name": "nightly-backup",
        "schedule": "0 2 * * *",
        "command": ["/usr/local/bin/backup", "--full"],
        "timezone": "Europe/Berlin",
        "timeout": "1h",
        "jitter": "30s",
        "overlap": "skip",
        "catchup": "latest",
        "catchup_window": "1h",
        "labels": {"role": "db"},
        "env": {"BACKUP_LEVEL": "full"},
        "history": 20,
        "paused": False,
        "workdir": None,
    }
    # the record survives a JSON round trip unchanged (what ZooKeeper gives back)
    assert json.loads(json.dumps(record)) == record
    assert (
        canonical_json(job)
        == json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert canonical_json(job).startswith(b'{"catchup":"latest","catchup_window":"1h",')
    assert len(job.content_hash) == 16
    int(job.content_hash, 16)
    assert JobSpec.from_record(record) == job
    assert JobSpec.from_record(canonical_json(job)).content_hash == job.content_hash
    assert dataclasses.replace(job, paused=True).content_hash != job.content_hash


def test_delivery_is_stored_only_when_at_least_once() -> None:
    """A job that keeps the default delivery keeps its record and hash (older daemons read
    it); an at-least-once job's record says so and comes back as it went."""
    job = load_job_file(EXAMPLE)["nightly-backup"]
    assert job.delivery == "at-most-once" and "delivery" not in job.to_record()
    alo = dataclasses.replace(job, delivery="at-least-once")
    assert alo.to_record()["delivery"] == "at-least-once"
    assert JobSpec.from_record(alo.to_record()) == alo
    assert alo.content_hash != job.content_hash
    text = '[jobs.j]\nschedule = "@daily"\ncommand = ["/bin/true"]\ndelivery = "at-least-once"\n'
    assert parse_job_file(text)["j"].delivery == "at-least-once"


def test_defaults_of_a_minimal_job() -> None:
    job = parse_job_file(MINIMAL)["j"]
    assert (job.timezone, job.timeout, job.jitter, job.overlap, job.catchup) == (
        "UTC",
        None,
        0.0,
        "skip",
        "latest",
    )
    assert (job.catchup_window, job.history, job.paused, job.workdir) == (3600.0, 20, False, None)
    assert dict(job.labels) == {} and dict(job.env) == {}
    assert job.to_record()["timeout"] is None


def test_defaults_table_applies_and_jobs_override() -> None:
    jobs = parse_job_file(
        """
        [defaults]
        timezone = "Europe/Berlin"
        timeout = "10m"
        labels = { role = "db", dc = "eu" }
        command = ["/usr/bin/run-job"]

        [jobs.a]
        schedule = "@hourly"

        [jobs.b]
        schedule = "*/5 * * * * *"
        timezone = "UTC"
        labels = { role = "web" }
        timeout = "none"
        workdir = "/srv/b"
        """
    )
    a, b = jobs["a"], jobs["b"]
    assert (a.timezone, a.timeout, dict(a.labels), a.command) == (
        "Europe/Berlin",
        600.0,
        {"dc": "eu", "role": "db"},
        ("/usr/bin/run-job",),
    )
    # a job's table replaces the default table whole: no merging
    assert (b.timezone, b.timeout, dict(b.labels), b.workdir) == (
        "UTC",
        None,
        {"role": "web"},
        "/srv/b",
    )


def test_schedule_text_is_normalised() -> None:
    job = parse_job_file(MINIMAL.replace('"0 2 * * *"', '"  0   2 * *  * "'))["j"]
    assert job.schedule == "0 2 * * *"
    job = parse_job_file(MINIMAL.replace('"0 2 * * *"', '"@Daily"'))["j"]
    assert job.schedule == "@daily"


# -- refusals, each naming job, field and line -------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ('schedule = "61 * * * *"', "schedule", "minute field '61': 61 is out of range 0-59"),
        ('schedule = "0 0 30 2 *"', "schedule", "never fires"),
        ('schedule = "@reboot"', "schedule", "unknown macro"),
        ("schedule = 5", "schedule", "must be a string, not an integer"),
        ('timezone = "Europe/Berln"', "timezone", "unknown time zone 'Europe/Berln'"),
        ('timezone = "../../etc/passwd"', "timezone", "unknown time zone"),
        ('timeout = "5 minutes"', "timeout", "invalid duration '5 minutes'"),
        ("timeout = 30", "timeout", 'must be a duration string such as "30s", not an integer'),
        ('timeout = "0s"', "timeout", "must be positive"),
        ('jitter = "2d"', "jitter", "the limit is 1d"),
        ('catchup_window = "400d"', "catchup_window", "the limit is 366d"),
        ('catchup_window = "1us"', "catchup_window", "invalid duration"),
        ('overlap = "queue"', "overlap", "overlap must be one of skip, allow; got 'queue'"),
        ('catchup = "some"', "catchup", "catchup must be one of latest, all, none"),
        ("catchup = true", "catchup", "got a boolean"),
        ("history = 0", "history", "between 1 and 1000, got 0"),
        ("history = 1001", "history", "between 1 and 1000"),
        ("history = true", "history", "must be an integer, not a boolean"),
        ("history = 20.0", "history", "must be an integer, not a float"),
        ('paused = "no"', "paused", "must be true or false, not a string"),
        ('workdir = "srv/job"', "workdir", "must be an absolute path"),
        ('labels = { "a/b" = "x" }', "labels", "label key 'a/b' is not allowed"),
        ("labels = { role = 5 }", "labels", "must be a string, not an integer"),
        ('labels = { role = "a\\nb" }', "labels", "printable"),
        ('labels = "role=db"', "labels", "must be a table"),
        ('env = { ZKSCHED_JOB = "x" }', "env", "reserved"),
        ('env = { zksched_member_id = "x" }', "env", "reserved"),
        ('env = { "1A" = "x" }', "env", "name '1A' is not allowed"),
        ('env = { "A-B" = "x" }', "env", "is not allowed"),
        ("env = { A = 1 }", "env", "the value of A must be a string, not an integer"),
        ('env = { A = "\\u0000" }', "env", "NUL"),
        ('env = { A = ["x"] }', "env", "not an array"),
        ('command = "backup --full"', "command", "argv, no shell"),
        ("command = []", "command", "must not be empty"),
        ('command = [""]', "command", "program (its first element) must not be empty"),
        ('command = ["/bin/echo", 5]', "command", "argument 1 must be a string"),
        ('command = ["/bin/echo", "a\\u0000b"]', "command", "NUL"),
        ('command = [["/bin/echo"]]', "command", "not an array"),
        ('timezon = "UTC"', "timezon", "unknown key (did you mean 'timezone'?)"),
        ('delivery = "exactly-once"', "delivery", "one of at-most-once, at-least-once"),
        ("delivery = true", "delivery", "delivery"),
    ],
)
def test_bad_values_name_job_field_and_line(line: str, field: str, message: str) -> None:
    key = line.split("=")[0].strip()
    lines = ["[jobs.j]", 'schedule = "0 2 * * *"', 'command = ["/bin/true"]']
    lines = [entry for entry in lines if not entry.startswith(f"{key} =")]
    text = "\n".join(["# a comment", *lines, line, ""])
    problem = only_problem(text)
    assert (problem.job, problem.field) == ("j", field)
    assert message in problem.message
    assert problem.line == len(lines) + 2  # the offending line, after the comment
    rendered = str(problem)
    assert rendered.startswith(f"jobs.toml:{problem.line}: job 'j', field '{field}': ")
    assert "\n" not in rendered


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../etc", "job name '../etc' is not allowed"),
        ("a/b", "job name 'a/b' is not allowed"),
        ("", "job name must not be empty"),
        ("x" * 129, "129 characters long; the limit is 128"),
        (".hidden", "is not allowed"),
        ("a b", "is not allowed"),
        ("jöb", "is not allowed"),
        ("a\\u0000b", "is not allowed"),
    ],
)
def test_bad_job_names(name: str, message: str) -> None:
    problem = only_problem(f'[jobs."{name}"]\nschedule = "@daily"\ncommand = ["/bin/true"]\n')
    assert problem.field is None
    assert message in problem.message
    assert problem.line == 1


def test_longest_name_is_accepted() -> None:
    name = "x" * 128
    assert list(parse_job_file(MINIMAL.replace("jobs.j", f"jobs.{name}"))) == [name]


def test_missing_command_and_schedule() -> None:
    problems = problems_of('[jobs.a]\nschedule = "@daily"\n\n[jobs.b]\ncommand = ["/bin/true"]\n')
    assert [(p.job, p.field, p.line) for p in problems] == [
        ("a", "command", 1),
        ("b", "schedule", 4),
    ]
    assert all(p.message.startswith("missing") for p in problems)


def test_toml_syntax_error_has_its_line() -> None:
    problem = only_problem('[jobs.j]\nschedule = "0 2 * * *"\ncommand = ["/bin/true"\n')
    assert problem.line == 3
    assert problem.message == "invalid TOML: Unclosed array at the end of the file"
    assert str(problem).startswith(f"jobs.toml:{problem.line}: invalid TOML")
    problem = only_problem('[jobs.j]\nschedule = "0 2 * * *\n')
    assert problem.line == 2


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of(
        """
        surprise = 1

        [defaults]
        timezone = "Mars/Olympus"
        color = "blue"

        [jobs.good]
        schedule = "@daily"
        command = ["/bin/true"]
        timezone = "UTC"

        [jobs.inherits-bad-zone]
        schedule = "@daily"
        command = ["/bin/true"]

        [jobs."../etc"]
        schedule = "nope"
        command = ["/bin/true"]

        [jobs.many]
        schedule = "* * *"
        command = "oops"
        timezone = "UTC"
        overlap = "never"
        history = -1
        """
    )
    found = [(p.job, p.field) for p in problems]
    assert found == [
        (None, "surprise"),
        (None, "defaults.timezone"),
        (None, "defaults.color"),
        ("../etc", None),
        ("../etc", "schedule"),
        ("many", "schedule"),
        ("many", "command"),
        ("many", "overlap"),
        ("many", "history"),
    ]
    assert [p.line for p in problems] == [2, 5, 6, 17, 18, 22, 23, 25, 26]
    assert all(p.source == "jobs.toml" for p in problems)


def test_inline_tables_and_dotted_keys_get_lines_where_possible() -> None:
    problems = problems_of(
        """[jobs]
a = { schedule = "bad", command = ["/bin/true"] }
b.schedule = "@daily"
b.command = "x"
"""
    )
    assert [(p.job, p.field, p.line) for p in problems] == [
        ("a", "schedule", 2),
        ("b", "command", 4),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobs = 5", "must be a table of jobs, not an integer"),
        ("[[jobs]]\nschedule = '@daily'", "not [[jobs]]"),
        ("defaults = [1]", "must be a table, not an array"),
        ("[jobs]\nj = 5", "a job must be a table, not an integer"),
        ("x = " + "[" * 5000 + "]" * 5000, "nested too deeply"),
        ("x = 1" + "0" * 5000, "invalid TOML"),
        ("x = 'a'\nx = 'b'", "invalid TOML"),
    ],
)
def test_malformed_documents(text: str, message: str) -> None:
    assert any(message in str(p) for p in problems_of(text))


def test_files_that_are_not_utf8_or_too_big() -> None:
    assert "not UTF-8" in str(problems_of(b"[jobs.j]\nschedule = '\xff'\n")[0])
    assert "limit" in str(problems_of(b" " * (MAX_FILE_BYTES + 1))[0])
    # a byte-order mark is fine
    assert list(parse_job_file(b"\xef\xbb\xbf" + MINIMAL.encode())) == ["j"]


def test_lone_surrogates_are_refused() -> None:
    problem = only_problem(MINIMAL + 'env = { A = "x\ud800" }\n')
    assert "not valid Unicode" in problem.message


def test_empty_file_has_no_jobs() -> None:
    assert parse_job_file("") == {}
    assert parse_job_file("[defaults]\ntimezone = 'UTC'\n") == {}


def test_unreadable_files(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.toml", tmp_path):
        with pytest.raises(JobSpecError) as caught:
            load_job_file(path)
        assert "cannot read the file" in str(caught.value)
        assert str(path) in str(caught.value)
    with pytest.raises(JobSpecError, match="cannot read"):
        load_job_file("bad\x00path")


# -- records -----------------------------------------------------------------------------------


def test_from_record_fills_defaults_for_missing_optional_keys() -> None:
    spec = JobSpec.from_record(
        {"format": 1, "name": "j", "schedule": "@daily", "command": ["/bin/true"]}
    )
    assert spec == parse_job_file(MINIMAL.replace('"0 2 * * *"', '"@daily"'))["j"]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([1, 2], "must be an object, not an array"),
        ("{not json", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        ("[" * 100_000, "not JSON"),
        ({"name": "j", "schedule": "@daily", "command": ["a"]}, "unsupported record format"),
        ({"format": 2, "name": "j", "schedule": "@daily", "command": ["a"]}, "format"),
        ({"format": True, "name": "j", "schedule": "@daily", "command": ["a"]}, "format"),
        ({"format": 1, "schedule": "@daily", "command": ["a"]}, "missing"),
        ({"format": 1, "name": "a/b", "schedule": "@daily", "command": ["a"]}, "not allowed"),
        ({"format": 1, "name": "j", "command": ["a"]}, "missing"),
        ({"format": 1, "name": "j", "schedule": "@daily", "command": ["a"], "x": 1}, "unknown"),
        (
            {"format": 1, "name": "j", "schedule": "@daily", "command": ["a"], "timeout": 30},
            "duration string",
        ),
        ('{"format":1,"name":"j","schedule":"@daily","command":["\\ud800"]}', "not valid Unicode"),
        (
            '{"format":1,"name":"j","schedule":"@daily","command":["a"],"history":1e999}',
            "must be an integer",
        ),
    ],
)
def test_from_record_refuses(record: object, message: str) -> None:
    with pytest.raises(JobSpecError) as caught:
        JobSpec.from_record(record)
    assert message in str(caught.value)


# -- the spec object ---------------------------------------------------------------------------


def test_specs_are_immutable_validated_values() -> None:
    spec = JobSpec(
        name="j",
        schedule="0 2 * * *",
        command=["/bin/true"],  # type: ignore[arg-type]
        labels={"role": "db"},
    )
    assert spec.command == ("/bin/true",)
    assert isinstance(spec.labels, FrozenMap)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "k"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.labels["role"] = "web"  # type: ignore[index]
    assert hash(spec) == hash(
        JobSpec(
            name="j", schedule="0 2 * * *", command=("/bin/true",), labels=FrozenMap({"role": "db"})
        )
    )
    assert {spec: 1}[dataclasses.replace(spec)] == 1
    with pytest.raises(JobSpecError) as caught:
        dataclasses.replace(spec, name="a/b", timeout=-1)
    assert [p.field for p in caught.value.problems] == ["name", "timeout"]
    with pytest.raises(JobSpecError, match="unknown time zone"):
        JobSpec(name="j", schedule="@daily", command=("a",), timezone="Nowhere/Land")


def test_durations_are_kept_to_the_millisecond() -> None:
    spec = JobSpec(name="j", schedule="@daily", command=("a",), timeout=1.0004, jitter=90)
    assert (spec.timeout, spec.jitter) == (1.0, 90.0)
    assert spec.to_record()["jitter"] == "90s"
    with pytest.raises(JobSpecError, match="out of range"):
        JobSpec(name="j", schedule="@daily", command=("a",), jitter=math.inf)


def test_a_huge_record_is_refused() -> None:
    with pytest.raises(JobSpecError, match="bytes as a record"):
        JobSpec(name="j", schedule="@daily", command=tuple(["x" * 60_000] * 5))


def test_problem_rendering() -> None:
    problem = SpecProblem(
        "nightly-backup", "timezone", "unknown time zone 'Europe/Berln'", 12, "jobs.toml"
    )
    assert str(problem) == (
        "jobs.toml:12: job 'nightly-backup', field 'timezone': unknown time zone 'Europe/Berln'"
    )
    assert str(SpecProblem(None, None, "oops")) == "oops"
    assert str(SpecProblem("j", None, "oops", 3)) == "line 3: job 'j': oops"
    assert str(SpecProblem("x" * 500, None, "oops")).startswith("job 'xxxx")
    assert len(str(SpecProblem("x" * 500, None, "oops"))) < 100
    error = JobSpecError([SpecProblem("a", None, "one"), SpecProblem("b", None, "two")])
    assert str(error) == "2 problems: job 'a': one; job 'b': two"


# -- hostile input: never anything but JobSpecError ----------------------------------------------

_ODD_TEXT = st.one_of(
    st.text(
        alphabet=st.one_of(
            st.characters(codec="utf-8"),
            st.sampled_from(
                ["\x00", "/", ".", "\u202e", "\ufeff", "\U0001f600", "=", '"', "\\", "\n", "*", " "]
            ),
        ),
        max_size=20,
    ),
    st.sampled_from(["..", "../etc", "a/b", "ZKSCHED_JOB", "x" * 129, "", "ok"]),
)
_SCALARS = st.one_of(
    _ODD_TEXT,
    st.sampled_from(["0 2 * * *", "@daily", "UTC", "Europe/Berlin", "30s", "skip", "all"]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.datetimes(max_value=datetime(9999, 1, 1)),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ODD_TEXT, inner, max_size=4),
    max_leaves=4,
)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return (
        "{"
        + ", ".join(
            f"{json.dumps(k, ensure_ascii=False)} = {_toml_value(v)}" for k, v in value.items()
        )
        + "}"
    )


def _assert_parses_or_refuses(text: str | bytes) -> None:
    try:
        jobs = parse_job_file(text, "fuzz.toml")
    except JobSpecError as exc:
        for problem in exc.problems:
            rendered = str(problem)
            assert rendered.startswith("fuzz.toml")
            assert "\n" not in rendered and "\x00" not in rendered
        return
    for name, spec in jobs.items():
        assert spec.name == name
        assert JobSpec.from_record(json.loads(canonical_json(spec))) == spec


_FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@_FUZZ
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300)))
def test_random_bytes_and_text(data: str | bytes) -> None:
    _assert_parses_or_refuses(data)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.one_of(_ODD_TEXT, st.just("ok"), st.text(min_size=120, max_size=140)),
    overrides=st.dictionaries(
        st.sampled_from(
            [
                *JOB_KEYS,
                "bogus",
                "../x",
            ]
        ),
        _VALUES,
        max_size=4,
    ),
    defaults=st.dictionaries(
        st.sampled_from(["timezone", "timeout", "labels", "weird"]), _VALUES, max_size=2
    ),
)
def test_random_job_tables(name: str, overrides: dict[str, Any], defaults: dict[str, Any]) -> None:
    body = {"schedule": "*/5 * * * *", "command": ["/bin/true"], **overrides}
    lines = ["[defaults]"]
    lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in defaults.items()]
    lines.append(f"[jobs.{json.dumps(name, ensure_ascii=False)}]")
    lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in body.items()]
    _assert_parses_or_refuses("\n".join(lines) + "\n")


@_FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "[jobs.a]",
                "[jobs.a.b.c]",
                "[defaults]",
                "[[jobs]]",
                'schedule = "@daily"',
                'command = ["/bin/true"]',
                "x = 1",
                '"quoted key" = 2',
                "a.b.c.d = 3",
                "= 4",
                "[",
                'labels = { role = "db" }',
                'env = { A = "\\u0000" }',
                "history = 99999999999999999999999",
                'timeout = "1h"',
                "jobs = 1",
                '"""',
                "'''",
                "# comment",
                "\x00",
                '[jobs."../x"]',
            ]
        ),
        max_size=12,
    )
)
def test_random_line_soup(lines: list[str]) -> None:
    _assert_parses_or_refuses("\n".join(lines))


def test_deep_tables_and_huge_values() -> None:
    deep = "[jobs." + ".".join(["a"] * 3000) + "]\nx = 1\n"
    _assert_parses_or_refuses(deep)
    _assert_parses_or_refuses('[jobs.j]\nschedule = "' + "*" * 10**6 + '"\n')
    _assert_parses_or_refuses("[jobs.j]\ncommand = [" + ", ".join(['"a"'] * 5000) + "]\n")
    _assert_parses_or_refuses("x = {" + "a = {" * 3000 + "}" * 3001)
    _assert_parses_or_refuses("[jobs.j]\nhistory = " + "9" * 4400 + "\n")


def test_an_argv_is_checked_as_before_whatever_was_seen_before() -> None:
    """Each distinct argv of plain strings is checked once and kept; anything else is checked
    element by element, every time, and never kept: an element that cannot be hashed, or a
    string subclass that claims to equal anything, changes no other job's argv."""

    class Unhashable:
        def __hash__(self) -> int:
            raise ZeroDivisionError

    class EqualsAll(str):
        def __eq__(self, other: object) -> bool:
            return isinstance(other, str) and str.__ne__(other, "")

        __hash__ = str.__hash__

    with pytest.raises(JobSpecError, match="argument 0 must be a string"):
        JobSpec("j", "0 2 * * *", [Unhashable()])  # type: ignore[list-item]
    odd = JobSpec("odd", "0 2 * * *", [EqualsAll("/bin/odd")])
    assert odd.command == ("/bin/odd",)
    plain = JobSpec("plain", "0 2 * * *", ["/bin/odd"])
    assert all(type(arg) is str for arg in plain.command)
    assert JobSpec("again", "0 2 * * *", ["/bin/odd"]).command is plain.command  # kept
