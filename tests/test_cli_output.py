"""Everything the CLI writes passes `say`: values read from ZooKeeper reach the terminal
escaped, whatever they hold (issue 19)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zksched.cli.output import say
from zksched.core.text import printable


def test_controls_are_shown_escaped_and_lines_kept(capsys: pytest.CaptureFixture[str]) -> None:
    say("job: evil\x1b]0;pwned\x07\nnext line \u202e here\r")
    out = capsys.readouterr().out
    assert out == "job: evil\\x1b]0;pwned\\x07\nnext line \\u202e here\\r\n"


def test_ordinary_text_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    say("zürich … 2026-01-02T02:00:00Z → ok", err=True)
    assert capsys.readouterr().err == "zürich … 2026-01-02T02:00:00Z → ok\n"


@given(st.text())
def test_nothing_a_terminal_acts_on_survives(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()


def test_the_daemon_s_text_log_escapes_what_it_quotes() -> None:
    """A lock holder's tag `evil\\x1b]0;PWNED\\x07` reached the daemon's text log raw."""
    import logging

    from zksched.runtime.logs import TextFormatter

    record = logging.LogRecord(
        "zksched.fire", logging.WARNING, __file__, 1, "waiting for %s", ("evil\x1b]0;x\x07",), None
    )
    line = TextFormatter().format(record)
    assert line.endswith("waiting for evil\\x1b]0;x\\x07") and line.isprintable()
    forged = logging.LogRecord(
        "zksched", logging.INFO, __file__, 1, "tag %s", ("x\n2026 ERROR forged",), None
    )
    assert TextFormatter().format(forged).endswith("tag x\\n2026 ERROR forged")  # one line
