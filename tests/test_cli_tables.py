"""The CLI's tables and `key: value` lines speak the operator's words: yes/no, `-` for none,
never Python's spelling (`zksched jobs list` printed `PAUSED False`)."""

from __future__ import annotations

import pytest

from zksched.cli.output import cell, echo_table


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (False, "no"),
        (True, "yes"),
        (None, "-"),
        ({}, "-"),
        ([], "-"),
        ((), "-"),
        ({"role": "db", "zone": "a"}, "role=db,zone=a"),
        (["/usr/bin/backup", "--full"], "/usr/bin/backup, --full"),
        ({"env": None, "on": True}, "env=-,on=yes"),
        (0, "0"),
        ("ok", "ok"),
    ],
)
def test_cells(value: object, shown: str) -> None:
    assert cell(value) == shown


def test_a_table_shows_no_python_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [["a", False, None, {}], ["b", True, "m1", {}]]
    echo_table(["NAME", "PAUSED", "OWNER", "LABELS"], rows)
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "NAME  PAUSED  OWNER  LABELS",
        "a     no      -      -",
        "b     yes     m1     -",
    ]
    for python in ("True", "False", "None", "{}", "[]"):
        assert python not in out
