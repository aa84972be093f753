"""Hostile job files through the command line (`check`, `jobs apply`), without ZooKeeper.

tests/test_jobspec.py fuzzes the parser itself; this proves what the operator sees: exit 0
with every valid job counted, or exit 2 with one line per problem and a one-line verdict,
never a traceback; `jobs apply` refuses an invalid file before it even connects (the
ZooKeeper given here does not exist, so reaching it would exit 3), and one bad job in a file
refuses the whole file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zksched.cli.main import cli
from zksched.core.jobspec import JOB_KEYS

NOWHERE = ["--zk", "127.0.0.1:1", "--connect-timeout", "0.1"]
_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None
)

HOSTILE_NAMES = [
    "a/b",
    "..",
    "../etc",
    ".hidden",
    "a\x00b",
    "nul\x00",
    "",
    " lead",
    "-dash",
    "x" * 129,
    "caf\u00e9",
    "\u202eevil",
    "zero\u200bwidth",
    "\U0001f600",
    "tab\tname",
    "new\nline",
    "a@b",
    "a:b",
]
ODD_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]), min_size=0, max_size=40
) | st.sampled_from(HOSTILE_NAMES)
HUGE = st.sampled_from(
    [
        10**30,
        -(10**30),
        2**63,
        float("inf"),
        float("nan"),
        1e308,
        "9" * 5000,
        "x" * 70_000,
        "1" + "d" * 1000,
    ]
)
VALUES: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | ODD_TEXT | HUGE,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ODD_TEXT, inner, max_size=3),
    max_leaves=12,
)
KEYS = st.sampled_from(JOB_KEYS)


def toml_key(key: str) -> str:
    # A TOML basic string: JSON's escapes are TOML's (raw non-ASCII: TOML refuses the
    # surrogate-pair escapes ensure_ascii would write for emoji).
    return json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if value != value
            else ("inf" if value > 0 else "-inf")
            if abs(value) == float("inf")
            else repr(value)
        )
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_key(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def assert_clean_refusal(result: Result) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert lines and lines[-1].startswith("zksched: ") and "problem" in lines[-1]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert all(line.strip() for line in lines)


def check_and_apply(path: Path) -> tuple[Result, Result]:
    return invoke("check", str(path)), invoke(*NOWHERE, "jobs", "apply", str(path))


def assert_consistent(path: Path, jobs: int, apply_valid: bool = False) -> None:
    """`check` and `apply` agree: valid (every job counted; apply goes on to connect and
    gets exit 3) or refused with exit 2 before connecting. Connecting costs the connect
    timeout, so valid files are applied only where asked."""
    checked = invoke("check", str(path))
    assert "Traceback" not in checked.output + checked.stderr
    if checked.exit_code == 0:
        assert checked.stdout.strip().endswith(f"{jobs} job{'s' if jobs != 1 else ''} OK")
        if apply_valid:
            applied = invoke(*NOWHERE, "jobs", "apply", str(path))
            assert applied.exit_code == 3, applied.output
            assert "cannot reach ZooKeeper" in applied.stderr
    else:
        assert_clean_refusal(checked)
        assert_clean_refusal(invoke(*NOWHERE, "jobs", "apply", str(path)))


@_SETTINGS
@given(name=ODD_TEXT, body=st.dictionaries(KEYS, VALUES, max_size=5))
def test_random_job_tables_are_accepted_or_refused_cleanly(
    tmp_path_factory: Any, name: str, body: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("j") / "jobs.toml"
    table = {"schedule": "@hourly", "command": ["/bin/true"], **body}
    lines = [f"[jobs.{toml_key(name)}]"] + [
        f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert_consistent(path, 1)


@_SETTINGS
@given(name=st.sampled_from(HOSTILE_NAMES))
def test_one_hostile_name_refuses_the_whole_file(tmp_path_factory: Any, name: str) -> None:
    path = tmp_path_factory.mktemp("j") / "jobs.toml"
    good = '[jobs.good]\nschedule = "@daily"\ncommand = ["/bin/true"]\n'
    bad = f'[jobs.{toml_key(name)}]\nschedule = "@daily"\ncommand = ["/bin/true"]\n'
    path.write_text(good + bad, encoding="utf-8")
    checked, applied = check_and_apply(path)
    assert_clean_refusal(checked)
    assert_clean_refusal(applied)
    assert "job name" in checked.stderr


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    names=st.lists(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", fullmatch=True),
        min_size=1,
        max_size=8,
        unique=True,
    ),
    env=st.dictionaries(
        st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True),
        st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), max_size=60),
        max_size=3,
    ),
    arg=st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), max_size=80),
)
def test_valid_files_with_odd_but_legal_values_lose_no_job(
    tmp_path_factory: Any, names: list[str], env: dict[str, str], arg: str
) -> None:
    path = tmp_path_factory.mktemp("j") / "jobs.toml"
    parts = []
    for name in names:
        parts.append(
            f'[jobs.{toml_key(name)}]\nschedule = "*/7 * * * *"\n'
            f'command = ["/bin/echo", {toml_value(arg)}]\nenv = {toml_value(env)}\n'
        )
    path.write_text("".join(parts), encoding="utf-8")
    checked = invoke("check", str(path))
    if checked.exit_code == 0:
        assert_consistent(path, len(names), apply_valid=True)
        return
    # Only the documented limits may refuse such a file (e.g. a name like "a..b" is legal).
    assert_clean_refusal(checked)
    assert "env" in checked.stderr or "job name" in checked.stderr, checked.stderr


def test_deep_huge_and_binary_files(tmp_path: Path) -> None:
    cases = {
        "deep.toml": "[jobs." + ".".join(["a"] * 2000) + "]\nx = 1\n",
        "nested.toml": "[jobs.j]\nenv = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n",
        "huge-int.toml": "[jobs.j]\nhistory = " + "9" * 4400 + "\n",
        "long-schedule.toml": '[jobs.j]\nschedule = "' + "1," * 200_000 + '1"\ncommand = ["x"]\n',
        "many-args.toml": '[jobs.j]\nschedule = "@daily"\ncommand = [' + '"a",' * 3000 + "]\n",
        "nul.toml": '[jobs.j]\nschedule = "@daily"\ncommand = ["a\\u0000b"]\n',
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        for result in check_and_apply(path):
            assert_clean_refusal(result)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00[jobs.x]\x00" * 100)
    for result in check_and_apply(binary):
        assert_clean_refusal(result)
    missing = tmp_path / "missing.toml"
    for result in check_and_apply(missing):
        assert_clean_refusal(result)
