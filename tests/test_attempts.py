"""The shell's log of a retried fire's earlier attempts (runtime/run/attempts.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from zksched.runtime.run.attempts import AttemptLog
from zksched.runtime.run.request import RunResult

FIRE = ("job", datetime(2026, 3, 1, tzinfo=UTC))
T = datetime(2026, 3, 1, tzinfo=UTC).timestamp()


def failed(start: float) -> RunResult:
    return RunResult("failed", 1, T + start, T + start + 0.5, "exit status 1")


def test_a_fire_without_retries_adds_nothing_to_its_record() -> None:
    assert AttemptLog().final(FIRE, RunResult("ok", 0, T, T + 1), "ok", None) == {
        "state": "ok",
        "started_at": "2026-03-01T00:00:00.000Z",
        "finished_at": "2026-03-01T00:00:01.000Z",
        "exit_code": 0,
        "error": None,
    }
    assert AttemptLog().final(FIRE, None, "skipped", None) == {}


def test_the_last_run_is_the_result_and_the_earlier_ones_are_listed() -> None:
    log = AttemptLog()
    assert [a["attempt"] for a in log.failed(FIRE, 1, failed(0), "failed", T + 2)] == [1]
    assert [a["attempt"] for a in log.failed(FIRE, 2, failed(2), "failed", T + 6)] == [1, 2]
    fields = log.final(FIRE, RunResult("ok", 0, T + 6, T + 7), "ok", None)
    assert fields["state"] == "ok" and fields["attempt"] == 3
    assert [(a["attempt"], a["state"], a["retry_at"]) for a in fields["attempts"]] == [
        (1, "failed", "2026-03-01T00:00:02.000Z"),
        (2, "failed", "2026-03-01T00:00:06.000Z"),
    ]
    assert log.final(FIRE, None, "skipped", None) == {}  # forgotten once written


def test_a_fire_that_gave_up_while_waiting_takes_its_last_attempts_result() -> None:
    log = AttemptLog()
    log.failed(FIRE, 1, failed(0), "failed", T + 2)
    log.failed(FIRE, 2, failed(2), "timeout", T + 6)
    fields = log.final(FIRE, None, "timeout", None)
    assert fields["state"] == "timeout" and fields["attempt"] == 2
    assert [a["attempt"] for a in fields["attempts"]] == [1]
    assert fields["started_at"] == "2026-03-01T00:00:02.000Z"


def test_a_retry_that_could_not_start_is_an_error_after_the_failed_attempts() -> None:
    log = AttemptLog()
    log.failed(FIRE, 1, failed(0), "failed", T + 2)
    fields = log.final(FIRE, None, "error", "not started: the daemon is stopping")
    assert fields == {
        "state": "error",
        "error": "not started: the daemon is stopping",
        "attempt": 2,
        "attempts": fields["attempts"],
    }
    assert [a["attempt"] for a in fields["attempts"]] == [1]


def test_a_fire_claimed_again_keeps_its_abandoned_attempt_first_and_counts_on() -> None:
    """At-least-once: the record of an orphan claimed again starts at attempt 2 and lists the
    abandoned attempt; a retry of it then fails once and passes: attempts 1, 2, 3 in all."""
    from zksched.core.firerecord import FireRecord
    from zksched.runtime.run.attempts import after_claim

    claimed = FireRecord(
        job="job",
        scheduled="2026-03-01T00:00:00Z",
        member_id="m2",
        session=2,
        nonce="b",
        state="running",
        claimed_at="2026-03-01T00:00:05.000Z",
        attempt=2,
        attempts=[{"attempt": 1, "state": "abandoned", "member_id": "m1"}],
    )
    log = AttemptLog()
    log.failed(FIRE, 2, failed(6.0), "failed", T + 8.0)
    fields = log.final(FIRE, RunResult("ok", 0, T + 9, T + 10), "ok", None)
    merged = after_claim(fields, claimed)
    assert merged["attempt"] == 3 and merged["state"] == "ok"
    assert [a["attempt"] for a in merged["attempts"]] == [1, 2]
    assert [a["state"] for a in merged["attempts"]] == ["abandoned", "failed"]
    # a first claim's fields are left as they are
    first = claimed.with_changes(attempt=None, attempts=None)
    assert after_claim(fields, first) == fields
