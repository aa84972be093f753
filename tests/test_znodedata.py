"""The decoding boundary for znode values: anything ZooKeeper holds is refused with a reason,
never with another exception, whatever its size, nesting or bytes (issue 19)."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.firerecord import FireRecord
from zksched.core.jobtable import is_function_job, parse_stored
from zksched.core.members import MemberRecordError, member_from_record
from zksched.core.znodedata import (
    ZnodeDataError,
    finite_number,
    load_json,
    load_json_keeping_unfit,
    load_object,
    unfit_problem,
)
from zksched.zk.clocks import ClockReading
from zksched.zk.jobstore import decode_bucket, encode_bucket

HOSTILE = [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"a":' * 30_000 + b"1" + b"}" * 30_000, "nested too deeply"),
    (b"9" * 5000, "not JSON"),
    (b'{"session": NaN}', "not JSON"),
    (b'{"session": Infinity}', "not JSON"),
    (b'{"session": 1e999}', "not a finite number"),
    (b"\xff\xfe", "not UTF-8"),
    (b"", "not JSON"),
    (b"x" * 2_000_000, "bytes; the limit"),
    (b'{"updated_at": "\\ud800"}', "not Unicode"),  # a lone surrogate fails every encode
    (b'["\\udfff\\ud83d"]', "not Unicode"),
]


@pytest.mark.parametrize(("raw", "why"), HOSTILE)
def test_each_class_of_hostile_value_is_refused_with_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(ZnodeDataError, match=why):
        load_json(raw, "a znode")


@pytest.mark.parametrize(("raw", "why"), HOSTILE)
def test_every_reader_refuses_them_as_its_own_record_only(raw: bytes, why: str) -> None:
    with pytest.raises(ValueError):
        FireRecord.from_json(raw)
    jobs, error = decode_bucket(raw)
    assert jobs == {} and error
    assert ClockReading.from_json(raw) is None


def test_surrogate_pairs_are_text() -> None:
    assert load_json(b'["\\ud83d\\ude00", "\\\\ud800"]', "a znode") == ["\U0001f600", "\\ud800"]


def test_numbers_a_float_cannot_hold_are_no_clock_reading() -> None:
    """A 400-digit integer passes JSON; math.isfinite raised OverflowError on it, out of
    `members` and `status`."""
    for offset in ("1" + "0" * 400, "-1" + "0" * 400, "1e400"):
        raw = f'{{"offset_ms": {offset}, "rtt_ms": 1, "measured_at": "x"}}'.encode()
        assert ClockReading.from_json(raw) is None
    assert finite_number(10**400) is None and finite_number(True) is None
    assert finite_number(3) == 3.0


def test_a_value_of_the_wrong_shape_is_refused_by_load_object() -> None:
    with pytest.raises(ZnodeDataError, match="not a JSON object"):
        load_object(b"[1, 2]", "a fire record")


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=300)
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=20,
    ).map(lambda v: json.dumps(v).encode())
)
def test_any_bytes_give_a_value_or_a_reason_never_another_exception(raw: bytes) -> None:
    try:
        value = load_json(raw, "a znode")
    except ZnodeDataError:
        return
    with contextlib.suppress(MemberRecordError):
        member_from_record("m.0000000001", value)
    with contextlib.suppress(ValueError):
        FireRecord.from_json(raw)
    decode_bucket(raw)


def test_bucket_entries_that_are_not_job_names_are_ignored_not_the_bucket(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A table key such as '..' or 'a/b' reached path building (`jobs list`, `audit`, and
    `jobs apply --prune` deleting 'its' fires): it is no job, and never a path."""
    entry = {"spec": {"format": 1}, "updated_at": "2026-01-01T00:00:00Z"}
    raw = json.dumps({"format": 1, "jobs": {"..": entry, "a/b": entry, "ok": entry}}).encode()
    jobs, error = decode_bucket(raw)
    assert list(jobs) == ["ok"] and error is None  # the bucket's jobs are all there
    assert "entries that are not job names (ignored): '..', 'a/b'" in caplog.text


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("Infinity", "not finite"),
        ("-Infinity", "not finite"),
        ("NaN", "not finite"),
        ("1e999", "not finite"),  # json reads it as inf
        ("-1E400", "not finite"),
        ('"\\ud800"', "lone surrogate"),
        ('{"\\udfff": 1}', "lone surrogate"),
    ],
)
def test_a_bucket_entry_that_cannot_be_used_disables_that_job_only(value: str, why: str) -> None:
    """One job's record holding NaN (or a lone surrogate) made the whole bucket unreadable:
    every job sharing it left the table, cluster-wide."""
    good = '{"spec": {"schedule": "@daily"}, "updated_at": "2026-01-01T00:00:00Z"}'
    bad = f'{{"spec": {{"timeout": [{{"a": {value}}}]}}, "updated_at": "2026-01-01T00:00:00Z"}}'
    raw = f'{{"format": 1, "jobs": {{"a": {good}, "b": {bad}, "c": {good}}}}}'.encode()
    jobs, error = decode_bucket(raw)
    assert error is None and sorted(jobs) == ["a", "b", "c"]
    assert jobs["a"].record == {"schedule": "@daily"}
    entry = parse_stored(jobs["b"])
    assert entry.spec is None and entry.error is not None
    assert entry.error.startswith("its stored record is unreadable") and why in entry.error
    # what a later write keeps for it is JSON its readers take, and says the same
    again, error = decode_bucket(encode_bucket(jobs))
    assert error is None and parse_stored(again["b"]).error == entry.error


def test_unfit_values_are_found_at_the_parsers_own_depth() -> None:
    raw = b"[" * 900 + b"NaN" + b"]" * 900
    value, found = load_json_keeping_unfit(raw, "a bucket")
    assert found and unfit_problem(value) is not None
    plain, found = load_json_keeping_unfit(b"[" * 900 + b"1.5" + b"]" * 900, "b")
    assert not found and unfit_problem(plain) is None  # no walk needed
    with pytest.raises(ZnodeDataError, match="not JSON"):
        load_json(raw, "a znode")  # refused whole, as every other reader does
    assert load_json_keeping_unfit(b'["\\ud800"]', "c")[1]


def test_an_unreadable_function_job_stays_a_function_job() -> None:
    """Its app replaces it (with replace=True), and `jobs apply --prune` leaves it, as any
    function job; it was taken for a command job of that name."""
    bad = '{"spec": {"kind": "function", "timeout": NaN}, "updated_at": "2026-01-01T00:00:00Z"}'
    jobs, error = decode_bucket(f'{{"format": 1, "jobs": {{"f": {bad}}}}}'.encode())
    assert error is None and is_function_job(jobs["f"])
    entry = parse_stored(jobs["f"])
    assert entry.error is not None and entry.error.startswith("its stored record is unreadable")
