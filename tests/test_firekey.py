"""Fire keys: `<job>@<UTC instant>`, the same on every host whatever its time zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.firekey import fire_key, format_utc, is_instant, parse_fire_key, parse_utc

INSTANT = datetime(2026, 1, 2, 2, 0, tzinfo=UTC)


def test_spec_example() -> None:
    assert fire_key("nightly-backup", INSTANT) == "nightly-backup@2026-01-02T02:00:00Z"
    assert format_utc(INSTANT) == "2026-01-02T02:00:00Z"


@pytest.mark.parametrize(
    "zone",
    [
        ZoneInfo("Europe/Berlin"),
        ZoneInfo("America/New_York"),
        ZoneInfo("Australia/Lord_Howe"),
        timezone(timedelta(hours=5, minutes=45)),
        UTC,
    ],
)
def test_same_key_in_any_zone(zone: timezone | ZoneInfo) -> None:
    assert fire_key("job", INSTANT.astimezone(zone)) == "job@2026-01-02T02:00:00Z"


def test_seconds_precision() -> None:
    assert format_utc(INSTANT + timedelta(microseconds=999_999)) == "2026-01-02T02:00:00Z"
    assert format_utc(datetime(5, 1, 1, tzinfo=UTC)) == "0005-01-01T00:00:00Z"


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="time-zone aware"):
        format_utc(datetime(2026, 1, 2))
    with pytest.raises(ValueError, match="time-zone aware"):
        fire_key("job", datetime(2026, 1, 2))


@pytest.mark.parametrize("job", ["", "../etc", "a/b", "a@b", "x" * 129, ".hidden"])
def test_bad_job_names_are_refused(job: str) -> None:
    with pytest.raises(ValueError):
        fire_key(job, INSTANT)


def test_parse_round_trip() -> None:
    assert parse_fire_key("nightly-backup@2026-01-02T02:00:00Z") == ("nightly-backup", INSTANT)
    assert parse_utc("2026-01-02T02:00:00Z") == INSTANT


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-02T02:00:00",
        "2026-01-02T02:00:00+00:00",
        "2026-01-02 02:00:00Z",
        "2026-01-02T02:00:00.000Z",
        "2026-02-30T02:00:00Z",
        "2026-01-02T24:00:00Z",
        "２026-01-02T02:00:00Z",
        "",
    ],
)
def test_parse_utc_accepts_only_the_canonical_form(text: str) -> None:
    with pytest.raises(ValueError):
        parse_utc(text)


@pytest.mark.parametrize(
    "key", ["job", "job@", "@2026-01-02T02:00:00Z", "a/b@2026-01-02T02:00:00Z", "job@yesterday"]
)
def test_parse_fire_key_refuses(key: str) -> None:
    with pytest.raises(ValueError):
        parse_fire_key(key)


@settings(max_examples=300, deadline=None)
@given(
    job=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", fullmatch=True),
    instant=st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(8999, 12, 30),
        timezones=st.sampled_from([UTC, ZoneInfo("Europe/Berlin")]),
    ),
)
def test_round_trip(job: str, instant: datetime) -> None:
    key = fire_key(job, instant)
    parsed_job, parsed_instant = parse_fire_key(key)
    assert parsed_job == job
    assert parsed_instant == instant.replace(microsecond=0)
    assert fire_key(parsed_job, parsed_instant) == key


def test_instants_outside_a_fire_s_years_are_refused() -> None:
    """A stray `0001-01-01T00:00:00Z` node overflowed the catch-up's arithmetic (its job
    stopped planning) and the audit's; such a name is not an instant."""
    for text in ("0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9999-12-31T23:59:59Z"):
        with pytest.raises(ValueError, match="outside the years"):
            parse_utc(text)
        assert not is_instant(text)
    assert is_instant("1970-01-01T00:00:00Z") and is_instant("8999-12-31T23:59:59Z")
    assert not is_instant("zzz") and not is_instant(None) and not is_instant("2026-02-30T00:00:00Z")
