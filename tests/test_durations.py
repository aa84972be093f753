"""Durations in job files: 500ms, 30s, 5m, 1h, 1d, combinations, and their canonical text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.durations import (
    MAX_DURATION_MS,
    format_duration,
    format_duration_ms,
    parse_duration,
    parse_duration_ms,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1d2h3m4s5ms", 93784.005),
        ("1.5h", 5400.0),
        ("0.25s", 0.25),
        ("0", 0.0),
        ("0s", 0.0),
        (" 30s ", 30.0),
        ("90s", 90.0),
        ("007s", 7.0),
        ("3650d", 3650 * 86400.0),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty duration"),
        ("30", "use a number and a unit"),
        ("30 s", "use a number and a unit"),
        ("-5s", "use a number and a unit"),
        ("5x", "use a number and a unit"),
        ("1e3s", "use a number and a unit"),
        ("inf", "use a number and a unit"),
        ("nan", "use a number and a unit"),
        ("1H", "use a number and a unit"),
        ("５s", "use a number and a unit"),  # a full-width digit
        (".5s", "use a number and a unit"),
        ("30m1h", "largest to smallest"),
        ("1s1s", "largest to smallest"),
        ("0.0001s", "finer than a millisecond"),
        ("1.0005s", "finer than a millisecond"),
        ("3651d", "the limit is 3650d"),
        ("99999999999d", "the limit is 3650d"),
        ("1" * 200 + "s", "too long"),
        ("30s\x00", "use a number and a unit"),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


def test_parse_refuses_non_strings() -> None:
    for value in (30, 1.5, None, ["30s"], True):
        with pytest.raises(ValueError, match="must be a string"):
            parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (1.5, "1500ms"),
        (30, "30s"),
        (90, "90s"),
        (300, "5m"),
        (5400, "90m"),
        (3600, "1h"),
        (86400, "1d"),
        (90000, "25h"),
        (0.0004, "0s"),  # rounded to the millisecond
    ],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("value", [-1, float("inf"), float("nan"), "30s", None, True])
def test_format_refuses(value: object) -> None:
    with pytest.raises(ValueError):
        format_duration(value)  # type: ignore[arg-type]


@settings(max_examples=500, deadline=None)
@given(st.integers(0, MAX_DURATION_MS))
def test_canonical_text_round_trips(millis: int) -> None:
    text = format_duration_ms(millis)
    assert parse_duration_ms(text) == millis
    assert format_duration(parse_duration(text)) == text


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=80))
def test_any_text_parses_or_fails_with_value_error(text: str) -> None:
    try:
        millis = parse_duration_ms(text)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert 0 <= millis <= MAX_DURATION_MS
