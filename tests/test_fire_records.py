from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zksched.core.firerecord import ClaimDraft, FireRecord


def record(**changes: object) -> FireRecord:
    base = dict(
        job="j",
        scheduled="2026-01-02T02:00:00Z",
        member_id="h-1",
        session=7,
        nonce="abc",
        state="running",
        claimed_at="2026-01-02T02:00:00.001Z",
    )
    base.update(changes)
    return FireRecord(**base)  # type: ignore[arg-type]


def test_round_trip_and_fire_key() -> None:
    r = record(exit_code=0, state="ok", fencing_token=42)
    assert FireRecord.from_json(r.to_json()) == r
    assert r.fire_key == "j@2026-01-02T02:00:00Z"


def test_json_omits_empty_fields_and_is_canonical() -> None:
    raw = record().to_json()
    assert b"exit_code" not in raw and b"extra" not in raw
    assert raw == record().to_json()


@pytest.mark.parametrize("raw", [b"[]", b"{}", b"not json", b'{"job": "j"}', b"\xff\xfe"])
def test_malformed_records_are_refused(raw: bytes) -> None:
    with pytest.raises((ValueError, UnicodeDecodeError)):
        FireRecord.from_json(raw)


@pytest.mark.parametrize("attempt", [-5, 0, 2**31, 1.5, True, "2"])
def test_an_attempt_out_of_range_makes_the_record_unreadable(attempt: object) -> None:
    """An orphan recorded with attempt -5 ran again as attempt -4, and its failure raised in
    the fire core's retry math: the job then stood still until a restart."""
    data = json.loads(record().to_json())
    with pytest.raises(ValueError, match="attempt"):
        FireRecord.from_json(json.dumps({**data, "attempt": attempt}).encode())
    assert FireRecord.from_json(json.dumps({**data, "attempt": 3}).encode()).attempt == 3


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    data = record().to_json()[:-1] + b',"future":1}'
    assert FireRecord.from_json(data) == record()


def test_running_record_of_a_dead_session_shows_as_abandoned() -> None:
    assert record().shown_state({7}) == "running"
    assert record().shown_state({8}) == "abandoned"
    assert record(state="ok").shown_state(set()) == "ok"


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(
    job=_text,
    member_id=_text,
    nonce=_text,
    claimed_at=_text,
    session=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    kind=st.sampled_from(["scheduled", "catchup", "trigger"]),
    extra=st.dictionaries(_text, st.integers() | _text, max_size=3),
)
def test_a_claim_drafted_ahead_is_the_record_claimed_when_sent(
    job: str,
    member_id: str,
    nonce: str,
    claimed_at: str,
    session: int,
    kind: str,
    extra: dict[str, object],
) -> None:
    made = record(job=job, member_id=member_id, nonce=nonce, session=session, kind=kind)
    made = replace(made, extra=extra, claimed_at="whatever it was when drafted")
    sent, payload = ClaimDraft.of(made).sent_at(claimed_at)
    assert sent == replace(made, claimed_at=claimed_at)
    assert payload == sent.to_json()  # byte for byte what the record would encode to
    assert json.loads(payload)["claimed_at"] == claimed_at


@given(
    state=st.sampled_from(["running", "ok", "failed", "skipped"]),
    exit_code=st.none() | st.integers(-64, 255),
    token=st.none() | st.integers(0, 2**62),
    claimed_at=st.text(max_size=30),
)
def test_with_changes_is_dataclasses_replace(
    state: str, exit_code: int | None, token: int | None, claimed_at: str
) -> None:
    original = record(extra={"k": 1})
    changes = {
        "state": state,
        "exit_code": exit_code,
        "fencing_token": token,
        "claimed_at": claimed_at,
    }
    changed = original.with_changes(**changes)
    assert changed == replace(original, **changes)  # type: ignore[arg-type]
    assert changed.to_json() == replace(original, **changes).to_json()  # type: ignore[arg-type]
    assert original == record(extra={"k": 1})  # the original is untouched
    with pytest.raises(AttributeError):  # as frozen as any other record
        changed.state = "ok"  # type: ignore[misc]


def test_with_changes_refuses_a_name_that_is_no_field() -> None:
    with pytest.raises(TypeError, match="stat"):
        record().with_changes(stat="ok")


@pytest.mark.parametrize("kind", ["weird", ["scheduled"], 5])
def test_a_kind_that_is_none_of_the_three_makes_the_record_unreadable(kind: object) -> None:
    """An orphan's kind was copied into its claim again as it stood (`jobs history` showed
    `['weird']`)."""
    data = json.loads(record().to_json())
    with pytest.raises(ValueError, match="kind"):
        FireRecord.from_json(json.dumps({**data, "kind": kind}).encode())
    assert FireRecord.from_json(json.dumps({**data, "kind": "catchup"}).encode()).kind == "catchup"
