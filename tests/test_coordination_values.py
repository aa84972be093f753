"""The coordination API's pure parts: claim instants, final records, paths, candidate names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from zksched.app.coordination import MAX_ERROR_CHARS, claim_instant, finished_record
from zksched.core.firerecord import FireRecord
from zksched.zk.election import parse_candidate
from zksched.zk.paths import ClusterPaths, bucket_of


def test_claim_instant_is_utc_to_the_second() -> None:
    berlin = timezone(timedelta(hours=1))
    when = claim_instant(datetime(2026, 1, 2, 3, 0, 0, 999_999, tzinfo=berlin))
    assert when == datetime(2026, 1, 2, 2, 0, 0, tzinfo=UTC)
    assert when.tzinfo is UTC and when.microsecond == 0


@pytest.mark.parametrize("bad", [datetime(2026, 1, 2, 3, 0), "2026-01-02T02:00:00Z", 0])
def test_claim_instant_refuses_naive_and_non_datetimes(bad: object) -> None:
    with pytest.raises(ValueError, match=r"must be a datetime|must be time-zone aware"):
        claim_instant(bad)  # type: ignore[arg-type]


def _record() -> FireRecord:
    return FireRecord(
        job="app",
        scheduled="2026-01-02T02:00:00Z",
        member_id="m-1",
        session=7,
        nonce="n",
        state="running",
        claimed_at="2026-01-02T02:00:00.010Z",
        fencing_token=42,
    )


def test_finished_record_keeps_the_claim_and_states_the_result() -> None:
    done = finished_record(
        _record(), "failed", "x" * (MAX_ERROR_CHARS + 50), "2026-01-02T02:00:05.000Z"
    )
    assert done.state == "failed" and done.fencing_token == 42 and done.nonce == "n"
    assert done.started_at == "2026-01-02T02:00:00.010Z"
    assert done.finished_at == "2026-01-02T02:00:05.000Z"
    assert done.error is not None and len(done.error) == MAX_ERROR_CHARS
    assert FireRecord.from_json(done.to_json()) == done


@pytest.mark.parametrize("status", ["running", "skipped", "OK", ""])
def test_finished_record_refuses_other_states(status: str) -> None:
    with pytest.raises(ValueError, match="status must be one of ok, failed, error"):
        finished_record(_record(), status, None, "2026-01-02T02:00:05.000Z")


def test_app_locks_and_the_election_have_their_own_folders() -> None:
    paths = ClusterPaths("c1")
    assert paths.app_lock("nightly") == f"/zksched/c1/applocks/{bucket_of('nightly')}/nightly"
    assert paths.app_lock("nightly") != paths.job_lock("nightly")
    assert paths.leader == "/zksched/c1/leader"
    assert paths.leader_candidate_prefix("ab12") == "/zksched/c1/leader/ab12__cand__"
    with pytest.raises(ValueError, match="lock name"):
        paths.app_lock("../x")
    with pytest.raises(ValueError, match="lock name must not be empty"):
        paths.app_lock("")
    with pytest.raises(ValueError, match="nonce"):
        paths.leader_candidate_prefix("a/b")


def test_candidate_names() -> None:
    assert parse_candidate("ab12__cand__0000000007") == (7, "ab12")
    for name in ("junk", "ab12__cand__7", "AB__cand__0000000001", "__cand__0000000001"):
        assert parse_candidate(name) is None
