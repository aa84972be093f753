"""Retries (`retries = N`, `retry_backoff`): the fire core's decisions and the backoff math."""

from __future__ import annotations

import dataclasses

import pytest
from fire_shell import SESSION, T0, Shell, at, spec
from hypothesis import given
from hypothesis import strategies as st

from zksched.core.fire import model as m
from zksched.core.fire.stages import FireStage
from zksched.core.retries import JITTER, MAX_BACKOFF, retry_delay


@given(
    backoff=st.floats(0.1, 86_400.0),
    attempt=st.integers(1, 12),
    key=st.text(min_size=1, max_size=30),
)
def test_the_pause_doubles_is_capped_and_jittered_within_bounds(
    backoff: float, attempt: int, key: str
) -> None:
    nominal = min(backoff * 2 ** (attempt - 1), max(backoff, MAX_BACKOFF))
    pause = retry_delay(backoff, attempt, key)
    assert nominal * (1 - JITTER) <= pause < nominal * (1 + JITTER)
    assert pause == retry_delay(backoff, attempt, key)  # the same on every host


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="count from 1"):
        retry_delay(1.0, 0, "job@x")


def failing(**changes: object) -> Shell:
    """A job every 10 minutes (time for its retries), the first instant claimed and run."""
    values: dict[str, object] = {"schedule": "*/10 * * * *", "retries": 2, "retry_backoff": 1.0}
    values.update(changes)
    shell = Shell(spec(**values), updated_at=T0)
    shell.join()
    if shell.of(m.TakeLease):  # overlap = skip
        shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.run(at(0), token=5)
    return shell


def test_a_failed_run_is_run_again_after_its_pause_same_token_next_attempt() -> None:
    shell = failing()
    out = shell.give(m.Exited(at(0), "failed"))
    [note] = [a for a in out if isinstance(a, m.RecordAttempt)]
    assert (note.attempt, note.status) == (1, "failed")
    assert not [a for a in out if isinstance(a, m.WriteResult)]
    assert shell.machine.fires[at(0)].stage is FireStage.BACKING_OFF
    assert shell.machine.holding  # the job stays held (overlap = skip: its lease too)
    assert not [a for a in shell.to(note.retry_at - T0 - 0.01) if isinstance(a, m.Start)]
    out = shell.to(note.retry_at - T0)
    assert [a for a in out if isinstance(a, m.Start)] == [
        m.Start("job", at(0), "scheduled", 5, attempt=2)
    ]
    shell.give(m.Started(at(0)))
    out = shell.give(m.Exited(at(0), "timeout"))
    [second] = [a for a in out if isinstance(a, m.RecordAttempt)]
    assert second.attempt == 2 and second.retry_at - shell.now > note.retry_at - T0  # doubled
    shell.to(second.retry_at - T0)
    shell.give(m.Started(at(0)))
    assert shell.give(m.Exited(at(0), "ok")) == [m.WriteResult("job", at(0), "ok")]
    starts = [a.attempt for a in shell.of(m.Start)]  # type: ignore[attr-defined]
    assert starts == [1, 2, 3]


def test_no_more_than_retries_attempts_and_the_last_status_is_the_result() -> None:
    shell = failing(retries=1)
    note = [a for a in shell.give(m.Exited(at(0), "failed")) if isinstance(a, m.RecordAttempt)]
    shell.to(note[0].retry_at - T0)
    shell.give(m.Started(at(0)))
    out = shell.give(m.Exited(at(0), "failed"))
    assert [a for a in out if isinstance(a, m.WriteResult)] == [
        m.WriteResult("job", at(0), "failed")
    ]
    assert not [a for a in out if isinstance(a, m.RecordAttempt)]


@pytest.mark.parametrize("status", ["ok", "terminated", "error"])
def test_only_failed_and_timed_out_runs_are_retried(status: str) -> None:
    shell = failing()
    out = shell.give(m.Exited(at(0), status))
    assert out == [m.WriteResult("job", at(0), status)]


def test_a_skip_job_never_retries_past_its_next_instant() -> None:
    """Every minute, a 40 s backoff: the second retry (80 s) would start after the next
    instant, so the fire ends with its second attempt's result."""
    shell = failing(schedule="* * * * *", retry_backoff=40.0)
    note = [a for a in shell.give(m.Exited(at(0), "failed")) if isinstance(a, m.RecordAttempt)]
    assert note and note[0].retry_at < T0 + 60
    shell.to(note[0].retry_at - T0)
    shell.give(m.Started(at(0)))
    out = shell.give(m.Exited(at(0), "failed"))
    assert m.WriteResult("job", at(0), "failed") in out
    assert [a.event for a in out if isinstance(a, m.Warn)] == ["retry-given-up"]


def test_an_allow_job_retries_past_its_next_instant() -> None:
    shell = failing(schedule="* * * * *", retry_backoff=80.0, overlap="allow")
    out = shell.give(m.Exited(at(0), "failed"))
    assert [a for a in out if isinstance(a, m.RecordAttempt)]


@pytest.mark.parametrize(
    "event",
    ["session-lost", "moved", "deleted", "paused", "lease-gone"],
)
def test_a_fire_backing_off_gives_up_when_the_job_is_no_longer_ours_to_run(event: str) -> None:
    """The last attempt's result becomes the fire's result; nothing starts again."""
    shell = failing()
    note = [a for a in shell.give(m.Exited(at(0), "failed")) if isinstance(a, m.RecordAttempt)]
    machine = shell.machine
    match event:
        case "session-lost":
            shell.feed(machine.session_lost(shell.now))
        case "moved":
            shell.feed(machine.set_owned(False, shell.now))
        case "deleted":
            shell.feed(machine.delete(shell.now))
        case "paused":
            paused = dataclasses.replace(machine.spec, paused=True)
            shell.feed(machine.set_spec(paused, T0, shell.now))
        case "lease-gone":
            shell.give(m.LeaseGone(shell.last_take()))
    shell.to(note[0].retry_at - T0 + 1)
    assert [a.attempt for a in shell.of(m.Start)] == [1]  # type: ignore[attr-defined]
    assert m.WriteResult("job", at(0), "failed") in shell.actions
    assert machine.fires[at(0)].stage is FireStage.WRITING


def test_a_short_disconnect_while_backing_off_gives_the_retry_up() -> None:
    """A retry starts only while connected throughout: a blip during the pause ends it."""
    shell = failing()
    note = [a for a in shell.give(m.Exited(at(0), "failed")) if isinstance(a, m.RecordAttempt)]
    shell.feed(shell.machine.set_session(None, shell.now))
    shell.feed(shell.machine.set_session(SESSION, shell.now + 0.1))
    shell.to(note[0].retry_at - T0)
    assert [a.attempt for a in shell.of(m.Start)] == [1]  # type: ignore[attr-defined]
