"""The fire core's decisions, as decisions: events in, actions out, no ZooKeeper, no clock.

Each test drives one `JobFireMachine` the way the shell does and checks what it asks for.
The issue's reproductions are here as unit tests (a slow job caught up, jitter over the
period, an outage longer than the catch-up window, ...); the cluster-wide behaviour is the
simulator's (tests/test_sim.py) and the real daemon's (integration/).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest
from fire_shell import SESSION, T0, Shell, at, claims, spec

from zksched.core.fire import model as m
from zksched.core.fire.job import JobPhase
from zksched.core.fire.stages import (
    LEASE_MOVES,
    TRANSITIONS,
    FireStage,
    IllegalTransition,
    LeaseStage,
    Step,
    check_lease_move,
    next_stage,
)
from zksched.core.firekey import fire_key, jitter_of
from zksched.core.jobspec import JobSpec

# -- the tables -------------------------------------------------------------------------------


@pytest.mark.parametrize(("stage", "step"), list(itertools.product(FireStage, Step)))
def test_every_move_of_a_fire_is_in_the_table_or_raises(stage: FireStage, step: Step) -> None:
    expected = TRANSITIONS.get((stage, step))
    if expected is None:
        with pytest.raises(IllegalTransition):
            next_stage(stage, step)
    else:
        assert next_stage(stage, step) is expected


def test_done_is_final_and_every_stage_can_reach_it() -> None:
    assert not any(stage is FireStage.DONE for stage, _ in TRANSITIONS)
    reach = {FireStage.DONE}
    for _ in FireStage:
        reach |= {s for (s, _), target in TRANSITIONS.items() if target in reach}
    assert reach == set(FireStage)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(LeaseStage, LeaseStage)))
def test_lease_moves(old: LeaseStage, new: LeaseStage) -> None:
    if old is new or (old, new) in LEASE_MOVES:
        assert check_lease_move(old, new) is new
    else:
        with pytest.raises(IllegalTransition):
            check_lease_move(old, new)


# -- one fire ---------------------------------------------------------------------------------


def test_an_allow_job_claims_starts_and_records_each_instant() -> None:
    shell = Shell(spec(overlap="allow"), updated_at=T0)
    shell.join()
    out = shell.to(0.0)
    assert out == [m.Claim("job", at(0), "scheduled", late=False)]
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 42))
    assert out == [m.Start("job", at(0), "scheduled", 42)]
    shell.give(m.Started(at(0)))
    assert shell.give(m.Exited(at(0), "ok")) == [m.WriteResult("job", at(0), "ok")]
    shell.give(m.ResultWritten(at(0)))
    assert shell.machine.fires == {}


def test_a_skip_job_takes_its_lease_ahead_and_claims_at_once_when_due() -> None:
    shell = Shell(spec(), updated_at=T0)
    assert m.TakeLease("job", 0.0, 1) in shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    assert claims(shell.to(0.0)) == [at(0)]


def test_no_start_before_the_claim_is_ours_and_none_for_a_taken_claim() -> None:
    shell = Shell(spec(overlap="allow"), updated_at=T0)
    shell.join()
    shell.to(0.0)
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.TAKEN, holder="other"))
    assert not [a for a in out if isinstance(a, m.Start)]
    assert shell.skips(m.SkipReason.ALREADY_CLAIMED) == [at(0)]
    assert not shell.of(m.RecordSkip)  # its record is there already


# -- overlap = skip: skipped, never queued -----------------------------------------------------


def test_an_instant_due_while_the_previous_run_goes_is_skipped_and_recorded() -> None:
    shell = Shell(spec(), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.run(at(0))
    out = shell.to(1.0)
    assert m.Skip("job", at(1), m.SkipReason.STILL_RUNNING) in out
    assert m.RecordSkip("job", at(1), "scheduled", m.SkipReason.STILL_RUNNING) in out
    shell.to(2.0)
    shell.finish(at(0))
    assert claims(shell.to(3.0)) == [at(3)]  # on time, not the skipped ones late


def test_a_slow_job_caught_up_at_start_skips_instead_of_queueing() -> None:
    """The issue's reproduction: `sleep 2.5` every second, applied 3 s before the first
    member starts. The catch-up runs the latest missed instant, then every instant due
    while a run goes is skipped `still-running`; none starts after its successor is due."""
    shell = Shell(spec(), updated_at=T0 - 3.0)
    shell.now = T0 + 0.2
    assert m.ReadHistory("job") in shell.join()
    shell.give(m.HistoryRead(()))
    catchup = shell.of(m.Claim)
    shell.lease(m.LeaseOutcome.TAKEN)
    catchup = shell.of(m.Claim)
    assert [(c.instant, c.kind) for c in catchup] == [(at(0), "catchup")]  # type: ignore[attr-defined]
    shell.run(at(0))
    started = {at(0): T0 + 0.2}
    for second in range(1, 30):
        out = shell.to(second + 0.001)
        for instant in claims(out):
            shell.run(instant)
            started[instant] = shell.now
        for instant, t in list(started.items()):
            if shell.now - t >= 2.5 and instant in shell.machine.fires:
                shell.finish(instant)
    for instant, t in started.items():
        assert t - instant.timestamp() < 1.0, f"{instant} started {t - instant.timestamp()}s late"
    assert len(shell.skips(m.SkipReason.STILL_RUNNING)) >= 15


def test_overlap_changed_to_skip_while_runs_go_skips_the_next_instant() -> None:
    shell = Shell(spec(overlap="allow"), updated_at=T0)
    shell.join()
    shell.to(0.0)
    shell.run(at(0))
    shell.feed(shell.machine.set_spec(spec(overlap="skip"), T0 + 0.5, T0 + 0.5))
    if shell.machine.lease is LeaseStage.TAKING:
        shell.lease(m.LeaseOutcome.TAKEN)
    out = shell.to(1.0)
    assert not claims(out)
    assert shell.skips(m.SkipReason.STILL_RUNNING) == [at(1)]


def test_a_lease_held_elsewhere_is_waited_for_until_the_successor_is_due_then_skipped() -> None:
    """Ownership moved while the old owner's run goes: the new owner waits for the lease no
    longer than the instant's successor, skips `still-running`, and runs the first instant
    due after the lease comes free, on time."""
    shell = Shell(spec(schedule="*/5 * * * * *"), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.BUSY, holder="old-owner")
    out = shell.to(0.0)
    (take,) = [a for a in out if isinstance(a, m.TakeLease)]
    assert 4.9 < take.wait <= 5.0  # up to the successor's due time
    shell.now = T0 + 5.0
    shell.lease(m.LeaseOutcome.BUSY, holder="old-owner")
    assert shell.skips(m.SkipReason.STILL_RUNNING) == [at(0)]
    out = shell.to(5.0)
    assert [a for a in shell.actions if isinstance(a, m.TakeLease)][-1].wait > 4.9
    shell.now = T0 + 5.02
    out = shell.lease(m.LeaseOutcome.TAKEN)
    assert claims(out) == [at(5)]


# -- catch-up -----------------------------------------------------------------------------------


def test_an_outage_longer_than_the_window_records_what_it_does_not_run() -> None:
    """Every-5-second job, window 20 s, nobody up for 45 s: the instants older than the
    window get a skip range record, the newest runs (latest)."""
    job = spec(schedule="*/5 * * * * *", catchup="latest", catchup_window=20.0)
    shell = Shell(job, updated_at=T0 - 12)
    shell.now = T0 + 45.5
    shell.join()
    shell.give(m.HistoryRead((at(-10), at(-5), at(0))))
    (record,) = shell.of(m.RecordSkip)
    assert record.reason is m.SkipReason.OUTSIDE_CATCHUP_WINDOW  # type: ignore[attr-defined]
    assert (record.covers_from, record.instant, record.count) == (at(5), at(40), 8)  # type: ignore[attr-defined]
    shell.lease(m.LeaseOutcome.TAKEN)
    assert [(c.instant, c.kind) for c in shell.of(m.Claim)] == [(at(45), "catchup")]  # type: ignore[attr-defined]


def test_catchup_none_records_everything_it_skips_and_runs_nothing() -> None:
    shell = Shell(spec(catchup="none"), updated_at=T0 - 0.5)
    shell.now = T0 + 10.5
    shell.join()
    shell.give(m.HistoryRead((at(0),)))
    (record,) = shell.of(m.RecordSkip)
    assert (record.covers_from, record.instant) == (at(1), at(10))  # type: ignore[attr-defined]
    assert not shell.of(m.Claim)


def test_a_record_from_the_future_is_reported_not_obeyed() -> None:
    shell = Shell(spec(schedule="0 * * * * *"), updated_at=T0 - 600)
    shell.now = T0 + 0.5
    shell.join()
    future = at(0) + timedelta(days=400)
    shell.give(m.HistoryRead((at(-300), future)))
    assert [a.event for a in shell.of(m.Warn)] == ["future-record"]  # type: ignore[attr-defined]
    record = shell.of(m.RecordSkip)
    assert all(r.instant <= at(0) for r in record)  # type: ignore[attr-defined]


def test_a_failed_history_read_is_tried_again_up_to_the_new_now() -> None:
    shell = Shell(spec(), updated_at=T0 - 100)
    shell.now = T0 + 0.5
    shell.join()
    shell.give(m.HistoryRead(ok=False))
    assert shell.machine.phase is JobPhase.PLANNING
    out = shell.to(1.5)
    assert m.ReadHistory("job") in out


def test_a_history_read_never_answered_is_asked_again_not_waited_for_ever() -> None:
    """The shell answers every read, a failed one too; were an answer ever lost (a bug in
    the shell), the job stood in PLANNING, firing nothing, until the member restarted."""
    shell = Shell(spec(), updated_at=T0 - 100, answer_deadline=30.0)
    shell.now = T0 + 0.5
    assert m.ReadHistory("job") in shell.join()
    assert m.ReadHistory("job") not in shell.to(29.0)  # an answer may still come
    assert m.ReadHistory("job") in shell.to(31.0)
    if [a for a in shell.give(m.HistoryRead((at(30),))) if isinstance(a, m.ReadRanges)]:
        shell.give(m.RangesRead(()))
    assert shell.machine.phase is JobPhase.ACTIVE
    shell.lease(m.LeaseOutcome.TAKEN)
    assert at(31) in claims(shell.actions)  # it fires again: the latest instant due


def test_skip_ranges_never_answered_are_read_again_from_the_history() -> None:
    shell = Shell(spec(catchup="all"), updated_at=T0 - 100, answer_deadline=30.0)
    shell.now = T0 + 0.5
    shell.join()
    out = shell.give(m.HistoryRead((at(-10), at(-8))))  # a hole at -9
    assert [a for a in out if isinstance(a, m.ReadRanges)]
    assert m.ReadHistory("job") in shell.to(31.0)
    out = shell.give(m.HistoryRead((at(-10), at(-8), at(30))))  # the new read is taken
    assert [a for a in out if isinstance(a, m.ReadRanges)]  # the hole is looked at again
    shell.give(m.RangesRead(()))
    assert shell.machine.phase is JobPhase.ACTIVE


# -- claims whose reply was lost -----------------------------------------------------------------


def unknown_claim(shell: Shell, instant: datetime) -> None:
    shell.give(m.ClaimAnswered(instant, m.ClaimOutcome.UNKNOWN))
    out = shell.to((shell.now - T0) + 0.5)
    assert m.Resolve("job", instant) in out


def test_a_lost_reply_is_resolved_and_run_if_ours_in_time() -> None:
    shell = Shell(spec(schedule="*/5 * * * * *"), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    unknown_claim(shell, at(0))
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 9))
    assert m.Start("job", at(0), "scheduled", 9) in out


def test_a_claim_resolved_ours_after_its_successor_was_due_is_recorded_not_run() -> None:
    shell = Shell(spec(), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    unknown_claim(shell, at(0))
    shell.now = T0 + 1.5
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 9))
    assert not [a for a in out if isinstance(a, m.Start)]
    (write,) = [a for a in out if isinstance(a, m.WriteResult)]
    assert (write.status, write.reason) == ("skipped", m.SkipReason.STILL_RUNNING)


def test_a_claim_that_never_landed_is_claimed_again_as_a_late_claim() -> None:
    shell = Shell(spec(overlap="allow"), updated_at=T0)
    shell.join()
    shell.to(0.0)
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.UNKNOWN))
    shell.to(1.0)  # the next instant's claim goes out meanwhile
    assert claims(shell.actions) == [at(0), at(1)]
    assert m.Resolve("job", at(0)) in shell.actions
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.ABSENT))
    assert m.Claim("job", at(0), "scheduled", late=True) in out  # refused inside a skip range


def test_a_late_claim_inside_a_newer_skip_range_is_recorded() -> None:
    shell = Shell(spec(overlap="allow"), updated_at=T0)
    shell.join()
    shell.to(2.0)  # late: at(2) is claimed 0 s late; make it late by hand
    shell.now = T0 + 3.5
    shell.give(m.ClaimAnswered(at(2), m.ClaimOutcome.TAKEN, passed=True))
    assert m.RecordSkip("job", at(2), "scheduled", m.SkipReason.ALREADY_CLAIMED) in shell.actions


# -- order, jitter, connection ----------------------------------------------------------------


def test_jitter_larger_than_the_period_keeps_instants_in_order() -> None:
    shell = Shell(spec(overlap="allow", jitter=3.0), updated_at=T0)
    shell.join()
    for tenth in range(0, 200):
        out = shell.to(tenth / 10)
        for instant in claims(out):
            shell.run(instant)
            shell.finish(instant)
    claimed = claims(shell.actions)
    assert claimed == sorted(claimed) and len(claimed) >= 15


def test_not_connected_starts_nothing_and_says_why() -> None:
    shell = Shell(spec(overlap="allow"), updated_at=T0)
    shell.join()
    shell.feed(shell.machine.set_session(None, shell.now))
    out = shell.to(0.0)
    assert not claims(out)
    assert shell.skips(m.SkipReason.NOT_CONNECTED) == [at(0)]


def cut_with_a_claim_in_flight(catchup: str = "all", overlap: str = "allow") -> Shell:
    """A member claims at(0), then loses contact (the watchdog) before the answer."""
    shell = Shell(spec(overlap=overlap, catchup=catchup), updated_at=T0 - 0.5)
    shell.join()
    if overlap == "skip":
        shell.lease(m.LeaseOutcome.TAKEN)
    assert claims(shell.to(0.0)) == [at(0)]
    shell.now = T0 + 0.3
    shell.feed(shell.machine.set_session(None, shell.now))
    return shell


def test_a_claim_answered_after_contact_was_lost_waits_and_is_withdrawn_once_connected() -> None:
    """Ours, but contact was lost since it was sent: never started, nor recorded as a skip
    (the member may be back on the same session a moment later). Once connected its record
    is withdrawn, and the catch-up planned after that runs the instant again."""
    shell = cut_with_a_claim_in_flight()
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 3))
    assert not [a for a in out if isinstance(a, m.Start | m.WriteResult | m.Withdraw)]
    assert shell.machine.fires[at(0)].stage is FireStage.PARKED
    shell.now = T0 + 1.6
    out = shell.feed(shell.machine.set_session(SESSION, shell.now))
    assert m.Withdraw("job", at(0)) in out
    assert m.ReadHistory("job") not in out  # the plan waits: at(0) may lose its record
    out = shell.give(m.Withdrawn(at(0)))
    assert m.ReadHistory("job") in out
    out = shell.give(m.HistoryRead(()))
    assert [(c.instant, c.kind, c.late) for c in shell.of(m.Claim)][1:] == [  # type: ignore[attr-defined]
        (at(0), "catchup", True),
        (at(1), "catchup", True),
    ]
    assert not shell.of(m.Start) and not shell.skips(m.SkipReason.NOT_CONNECTED)


@pytest.mark.parametrize(
    "moved",
    ["before the plan", "after the plan", "while away again", "before the withdrawal's answer"],
)
def test_a_withdrawn_instant_is_recorded_if_the_job_moves_before_its_catchup_claims_it(
    moved: str,
) -> None:
    """Regression (simulator, seed 991): the member withdrew its interrupted claim while the
    job was moving to a member that had just joined; that member's history read still saw
    the claim (its record), and the withdrawing member lost the job before its own catch-up
    ran: no record, no run. Leaving, it records the instant (not-connected); a record made
    meanwhile by the new owner wins (the create finds it). Seed 1824: the job moved while
    the withdrawal was on its way."""
    shell = cut_with_a_claim_in_flight(catchup="latest", overlap="skip")
    shell.feed(shell.machine.session_lost(shell.now))  # the lease went with the session
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 3))
    shell.now = T0 + 0.6
    shell.feed(shell.machine.set_session(SESSION, shell.now))
    if moved == "before the withdrawal's answer":
        shell.feed(shell.machine.set_owned(False, shell.now))
        assert not shell.of(m.RecordSkip)  # the claim is still there
    shell.give(m.Withdrawn(at(0)))
    if moved == "after the plan":
        shell.give(m.HistoryRead(()))  # plans to catch at(0) up, waiting for the lease
    if moved == "while away again":
        shell.feed(shell.machine.set_session(None, shell.now))
    shell.feed(shell.machine.set_owned(False, shell.now))
    if moved == "while away again":
        assert not shell.of(m.RecordSkip)  # not while it cannot write
        shell.feed(shell.machine.set_session(SESSION, shell.now + 1))
    records = [(r.instant, r.reason) for r in shell.of(m.RecordSkip)]  # type: ignore[attr-defined]
    assert records == [(at(0), m.SkipReason.NOT_CONNECTED)]


def test_a_withdrawn_instant_the_catchup_claimed_is_not_recorded_again() -> None:
    shell = cut_with_a_claim_in_flight(catchup="all")
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 3))
    shell.now = T0 + 0.6
    shell.feed(shell.machine.set_session(SESSION, shell.now))
    shell.give(m.Withdrawn(at(0)))
    shell.give(m.HistoryRead(()))
    assert at(0) in claims(shell.actions[-3:])
    shell.feed(shell.machine.set_owned(False, shell.now))
    assert not shell.of(m.RecordSkip)


def test_a_claim_resolved_after_contact_was_lost_is_withdrawn_too() -> None:
    shell = cut_with_a_claim_in_flight(overlap="skip")
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.UNKNOWN))
    shell.to(1.0)
    assert not shell.of(m.Resolve)  # not while disconnected
    out = shell.feed(shell.machine.session_lost(shell.now))
    shell.now = T0 + 1.7
    out = shell.feed(shell.machine.set_session(SESSION, shell.now))
    assert m.Resolve("job", at(0)) in out and m.ReadHistory("job") not in out
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 4))
    assert out == [m.Withdraw("job", at(0))]


def test_an_interrupted_claim_that_never_landed_is_left_to_the_catchup() -> None:
    shell = cut_with_a_claim_in_flight(catchup="latest")
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.UNKNOWN))
    shell.now = T0 + 2.5
    shell.feed(shell.machine.set_session(SESSION, shell.now))
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.ABSENT))
    assert m.ReadHistory("job") in out
    assert not shell.of(m.RecordSkip) and not [a for a in out if isinstance(a, m.Claim)]
    shell.give(m.HistoryRead(()))
    # latest: the newest missed instant runs, the rest are one skip range
    (record,) = shell.of(m.RecordSkip)
    assert (record.covers_from, record.instant) == (at(0), at(1))  # type: ignore[attr-defined]
    assert [c.instant for c in shell.of(m.Claim)][1:] == [at(2)]  # type: ignore[attr-defined]


def test_an_interrupted_claim_of_a_job_that_moved_is_recorded_not_withdrawn() -> None:
    shell = cut_with_a_claim_in_flight()
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 3))
    shell.feed(shell.machine.set_owned(False, shell.now))
    out = shell.feed(shell.machine.set_session(SESSION, shell.now))
    assert not [a for a in out if isinstance(a, m.Withdraw | m.Start)]
    (write,) = [a for a in out if isinstance(a, m.WriteResult)]
    assert (write.status, write.reason) == ("skipped", m.SkipReason.NOT_CONNECTED)


def test_a_withdrawal_whose_reply_was_lost_is_sent_again_when_connected() -> None:
    shell = cut_with_a_claim_in_flight()
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 3))
    shell.feed(shell.machine.set_session(SESSION, shell.now))
    shell.feed(shell.machine.set_session(None, shell.now))
    assert not [a for a in shell.give(m.Withdrawn(at(0), done=False)) if isinstance(a, m.Withdraw)]
    shell.to(5.0)
    assert len(shell.of(m.Withdraw)) == 1  # not while disconnected
    out = shell.feed(shell.machine.set_session(SESSION, shell.now))
    assert m.Withdraw("job", at(0)) in out


def test_an_instant_waiting_for_the_lease_when_the_session_goes_is_caught_up() -> None:
    """Regression: a session lost while a fire waited for the job's lease (no
    disconnection seen first) dropped the instant and planned the next catch-up after it."""
    shell = Shell(spec(schedule="*/5 * * * * *", catchup="all"), updated_at=T0 - 0.5)
    shell.join()
    shell.lease(m.LeaseOutcome.BUSY, holder="old", running=False)
    shell.to(0.0)
    assert shell.machine.fires[at(0)].stage is FireStage.LEASING
    shell.now = T0 + 3.0
    shell.feed(shell.machine.session_lost(shell.now))
    out = shell.feed(shell.machine.set_session(SESSION, shell.now))
    assert m.ReadHistory("job") in out
    shell.give(m.HistoryRead(()))
    shell.lease(m.LeaseOutcome.TAKEN)
    assert [c.instant for c in shell.of(m.Claim)] == [at(0)]  # type: ignore[attr-defined]


def test_a_late_answer_to_a_take_given_up_is_never_taken_for_the_new_take() -> None:
    """Regression (simulator seed 1991, an overlap): a take sent before the watchdog gave
    the session up answered late, after the member came back on the same session and sent
    a new take. The old answer was taken for the new one; the core then took the new
    take's TAKEN for a stale answer and gave back the lock it believed it held."""
    shell = Shell(spec(), updated_at=T0)
    shell.join()
    old = shell.last_take()
    shell.feed(shell.machine.session_lost(shell.now))
    shell.feed(shell.machine.set_session(SESSION, shell.now))
    shell.give(m.HistoryRead(()))
    shell.to(0.0)  # the instant is due: a new take
    new = shell.last_take()
    assert new != old and shell.machine.lease is LeaseStage.TAKING
    out = shell.give(m.LeaseAnswered(m.LeaseOutcome.UNKNOWN, old))
    assert not [a for a in out if isinstance(a, m.TakeLease)]  # the new take is awaited
    assert shell.machine.lease is LeaseStage.TAKING
    assert claims(shell.give(m.LeaseAnswered(m.LeaseOutcome.TAKEN, new))) == [at(0)]
    assert shell.machine.lease is LeaseStage.HELD
    # a stale TAKEN (the old take's node, on the session that lived on) goes back alone
    out = shell.give(m.LeaseAnswered(m.LeaseOutcome.TAKEN, old))
    assert out == [m.GiveBackLease("job", old)]
    assert shell.machine.lease is LeaseStage.HELD


def test_a_vanished_lock_is_forgotten_by_the_shell_and_taken_again() -> None:
    shell = Shell(spec(schedule="*/5 * * * * *"), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    held = shell.last_take()
    assert shell.give(m.LeaseGone(held + 99)) == []  # not the lock it holds
    out = shell.give(m.LeaseGone(held))
    assert m.GiveBackLease("job", held) in out and shell.machine.lease is LeaseStage.FREE
    out = shell.to(0.0)
    assert [a.take for a in out if isinstance(a, m.TakeLease)] == [held + 1]


def test_a_lost_session_terminates_runs_and_forgets_the_lease() -> None:
    shell = Shell(spec(), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.run(at(0))
    out = shell.feed(shell.machine.session_lost(shell.now))
    assert m.Terminate("job", at(0), "session lost") in out
    assert shell.machine.lease is LeaseStage.FREE


def test_a_paused_job_fires_nothing() -> None:
    shell = Shell(spec(paused=True), updated_at=T0)
    shell.join()
    out = shell.to(0.0)
    assert not claims(out) and shell.skips(m.SkipReason.PAUSED) == [at(0)]


# -- triggers ------------------------------------------------------------------------------------


def test_a_trigger_of_a_running_skip_job_runs_once_after_the_run() -> None:
    shell = Shell(spec(schedule="0 * * * * *"), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.run(at(0))
    shell.now = T0 + 5.5
    assert not claims(shell.give(m.Triggered("t-1")))
    shell.finish(at(0))
    (trigger,) = [a for a in shell.of(m.Claim) if a.kind == "trigger"]  # type: ignore[attr-defined]
    assert trigger.instant == at(5)  # type: ignore[attr-defined]
    assert not shell.skips(m.SkipReason.STILL_RUNNING)


def test_a_trigger_whose_instant_another_claimed_runs_at_a_later_second() -> None:
    """Regression (simulator seed 1150): two triggers in one second on two members (the
    job moved between them) chose the same instant; the second's claim was taken and the
    trigger was dropped, never run."""
    shell = Shell(spec(schedule="0 * * * * *", overlap="allow"), updated_at=T0)
    shell.join()
    shell.now = T0 + 5.2
    shell.give(m.Triggered("t-2"))
    (first,) = [a for a in shell.of(m.Claim) if a.kind == "trigger"]  # type: ignore[attr-defined]
    shell.give(m.ClaimAnswered(first.instant, m.ClaimOutcome.TAKEN, holder="other"))  # type: ignore[attr-defined]
    shell.to(6.1)
    again = [a for a in shell.of(m.Claim) if a.kind == "trigger"]  # type: ignore[attr-defined]
    assert len(again) == 2 and again[1].instant > first.instant  # type: ignore[attr-defined]
    shell.run(again[1].instant, token=9)  # type: ignore[attr-defined]
    assert [a.kind for a in shell.of(m.Start)] == ["trigger"]  # type: ignore[attr-defined]


def test_a_trigger_taken_as_the_job_moves_is_handed_back() -> None:
    shell = Shell(spec(schedule="0 * * * * *"), updated_at=T0)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.run(at(0))
    shell.give(m.Triggered("t-1"))
    out = shell.feed(shell.machine.set_owned(False, shell.now))
    assert m.ReturnTrigger("job", "t-1") in out


def test_a_lease_held_between_runs_leaves_the_instants_to_a_catchup() -> None:
    """A member that died holding the lease (its session not expired yet) runs nothing, so
    the instants are not `still-running` skips: once the lease is ours they are planned by
    the catch-up policy (`all` runs them, in order)."""
    shell = Shell(spec(catchup="all"), updated_at=T0 - 0.5)
    shell.join()
    shell.lease(m.LeaseOutcome.BUSY, holder="dead", running=False)
    shell.to(0.0)
    shell.now = T0 + 1.0
    shell.lease(m.LeaseOutcome.BUSY, holder="dead", running=False)
    assert not shell.skips(m.SkipReason.STILL_RUNNING)
    assert [a.event for a in shell.of(m.Warn)] == ["lease-wait"]  # type: ignore[attr-defined]
    shell.to(1.0)
    shell.now = T0 + 1.5
    out = shell.lease(m.LeaseOutcome.TAKEN)
    assert m.ReadHistory("job") in out
    shell.give(m.HistoryRead(()))
    claimed = [(c.instant, c.kind) for c in shell.of(m.Claim)]  # type: ignore[attr-defined]
    assert claimed == [(at(0), "catchup")]  # then at(1), after it: one run at a time


def test_the_member_core_keeps_what_it_owned_while_disconnected() -> None:
    from zksched.core.fire.member import MemberFireCore

    core = MemberFireCore()
    table = {"a": (spec(name="a", overlap="allow"), T0), "b": (spec(name="b"), T0)}
    core.table_changed(table, T0 - 0.5)
    core.view_changed(SESSION, lambda name, _spec: name == "a", T0 - 0.5)
    assert core.owned() == ["a"]
    out = core.view_changed(None, lambda _n, _s: False, T0 - 0.4)
    assert core.owned() == ["a"]  # owned still, but nothing is claimed
    assert not [a for a in out if isinstance(a, m.Claim)]
    out = core.handle("a", m.Tick(), T0 + 0.01)
    assert [a.reason for a in out if isinstance(a, m.Skip)] == [m.SkipReason.NOT_CONNECTED]
    core.view_changed(SESSION, lambda name, _spec: name == "b", T0 + 0.5)
    assert core.owned() == ["b"]
    assert "a" not in core.jobs  # forgotten: nothing in flight


@pytest.mark.parametrize("overlap", ["allow", "skip"])
def test_a_claim_in_flight_at_a_graceful_stop_still_starts(overlap: str) -> None:
    """A stopping member leaves the owner table but keeps its session until its fires are
    through: an instant it claimed as it stopped is its own to run (the next owner finds the
    claim taken), never a skip that loses it."""
    from zksched.core.fire.member import MemberFireCore

    core = MemberFireCore()
    core.table_changed({"a": (spec(name="a", overlap=overlap), T0)}, T0 - 0.5)
    out = core.view_changed(SESSION, lambda _n, _s: True, T0 - 0.5)
    if overlap == "skip":
        assert m.TakeLease("a", 0.0, 1) in out
        core.handle("a", m.LeaseAnswered(m.LeaseOutcome.TAKEN, 1), T0 - 0.4)
    out = core.handle("a", m.Tick(), T0 + 0.01)
    assert [a.instant for a in out if isinstance(a, m.Claim)] == [at(0)]
    out = core.stop(T0 + 0.02)
    assert not [a for a in out if isinstance(a, m.GiveBackLease)]  # busy: kept for the run
    # the daemon left the cluster: same session, owning nothing
    core.view_changed(SESSION, lambda _n, _s: False, T0 + 0.03)
    out = core.handle("a", m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 5), T0 + 0.04)
    assert [a for a in out if isinstance(a, m.Start)] == [m.Start("a", at(0), "scheduled", 5)]
    assert not [a for a in out if isinstance(a, m.Skip)]


def test_an_instant_due_when_a_held_planning_is_released_fires_at_once() -> None:
    """Regression (simulator, seed 53): the planning released after a withdrawal set the
    next instant to one already due (its jitter had passed) after the due loop had run, and
    no timer was set for a time already past: the instant waited for the next event and
    was lost when the member lost contact again."""
    job = spec(overlap="allow", catchup="latest", jitter=3.0, schedule="*/10 * * * * *")
    shell = Shell(job, updated_at=T0 - 0.6)
    shell.join()
    due = next(c for c in (shell.to(s / 10) for s in range(0, 40)) if claims(c))
    (instant,) = claims(due)
    shell.feed(shell.machine.set_session(None, shell.now))
    shell.give(m.ClaimAnswered(instant, m.ClaimOutcome.CREATED, 3))
    shell.now += 0.05
    shell.feed(shell.machine.set_session(SESSION, shell.now))
    out = shell.give(m.Withdrawn(instant))
    assert instant in claims(out)  # at once, not at the next event


def test_a_catchup_that_waited_past_its_window_for_the_lease_is_recorded_not_run() -> None:
    """Regression (simulator, seed 128): a catch-up instant queued inside its window waited
    for a lease held by the previous owner's long run, and ran 9 s late, window 5 s."""
    shell = Shell(spec(schedule="*/10 * * * * *", catchup_window=5.0), updated_at=T0 - 10.5)
    shell.now = T0 + 4.5
    shell.join()
    shell.give(m.HistoryRead((at(-10),)))
    shell.lease(m.LeaseOutcome.BUSY, holder="old", running=True)
    shell.to(4.6)
    shell.now = T0 + 9.3
    out = shell.lease(m.LeaseOutcome.TAKEN)
    assert at(0) not in claims(out)
    assert m.RecordSkip("job", at(0), "scheduled", m.SkipReason.OUTSIDE_CATCHUP_WINDOW) in out


def test_an_instant_due_while_the_last_catchup_runs_goes_behind_it_with_all() -> None:
    """Regression (chaos partition, seed 1): a new owner ran three missed instants one after
    another; the third was still running when the next instant came due, and that instant
    was skipped `still-running` (the catch-up's queue was empty by then). With `all` it goes
    behind the catch-up, and runs once the catch-up ends, if its successor is not due yet."""
    shell = Shell(spec(catchup="all"), updated_at=T0 - 3.5)
    shell.now = T0 - 0.02
    shell.join()
    shell.give(m.HistoryRead((at(-3),)))
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.run(at(-2))
    shell.finish(at(-2))
    shell.run(at(-1))  # the catch-up's last instant, running
    assert not claims(shell.to(0.0))
    assert not shell.skips(m.SkipReason.STILL_RUNNING)
    shell.now = T0 + 0.005
    shell.finish(at(-1))
    assert [(c.instant, c.kind) for c in shell.of(m.Claim)] == [  # type: ignore[attr-defined]
        (at(-2), "catchup"),
        (at(-1), "catchup"),
        (at(0), "scheduled"),
    ]


def drive(shell: Shell, run_for: float, until: float, step: float = 0.05) -> dict[datetime, float]:
    """Runs every claim at once and ends each run `run_for` s after its start; returns when
    each instant started."""
    started: dict[datetime, float] = {}
    t = shell.now - T0
    while t < until:
        t += step
        shell.to(t)
        for instant in list(shell.machine.fires):
            if instant in started and shell.now - started[instant] >= run_for:
                shell.finish(instant)
        for instant in claims(shell.actions):
            if instant not in started and instant in shell.machine.fires:
                shell.run(instant)
                started[instant] = shell.now
    return started


def catching_up_with_all(since: float) -> Shell:
    """An every-second `catchup = "all"` job changed `since` seconds before T0, taken over
    just before T0 with no history: its catch-up begins."""
    shell = Shell(spec(catchup="all"), updated_at=T0 - since)
    shell.now = T0 - 0.2
    shell.join()
    shell.give(m.HistoryRead(()))
    shell.lease(m.LeaseOutcome.TAKEN)
    return shell


def test_a_fast_job_runs_the_instants_due_during_a_long_catchup_as_part_of_it() -> None:
    """Regression (busy suite, chaos zk-outage): a member back from an outage caught up 14
    instants one after another, slower than usual under load; the instants due meanwhile
    waited behind, their turn came after their successors were due, and they were skipped
    `still-running` although each run takes far less than the period. With `all` they run,
    late, as part of the catch-up, and the job is back on time once it is done."""
    shell = catching_up_with_all(since=14.5)
    started = drive(shell, run_for=0.3, until=12.0)
    assert not shell.skips(m.SkipReason.STILL_RUNNING)
    assert set(started) >= {at(s) for s in range(-14, 12)}
    assert started[at(11)] - at(11).timestamp() < 0.2  # on time again
    kinds = {c.instant: c.kind for c in shell.of(m.Claim)}  # type: ignore[attr-defined]
    assert kinds[at(0)] == "catchup" and kinds[at(11)] == "scheduled"


def test_a_slow_job_behind_a_catchup_skips_rather_than_falling_behind_with_all() -> None:
    """The same catch-up for a job that runs longer than its period: the instants due while
    it goes are skipped `still-running` (it would never catch up), and none starts more
    than one run late."""
    shell = catching_up_with_all(since=3.5)
    started = drive(shell, run_for=1.5, until=20.0)
    assert shell.skips(m.SkipReason.STILL_RUNNING)
    late = {i: t - i.timestamp() for i, t in started.items() if i >= at(0)}
    assert late and max(late.values()) < 2.0, late


def test_an_instant_due_while_the_catchup_is_planned_is_part_of_it_with_all() -> None:
    """Regression (chaos partition, seed 2): an instant that came due while a member back
    from a short cut read its history was queued behind the catch-up as a scheduled
    instant, and skipped `still-running` when the catch-up's first run (waiting for the
    lease) outlasted it. Missed by the same outage, `all` runs it."""
    shell = Shell(spec(catchup="all"), updated_at=T0 - 2.5)
    shell.now = T0 - 0.5
    assert m.ReadHistory("job") in shell.join()
    shell.to(0.0)  # due while the history is read
    shell.now = T0 + 0.1
    shell.give(m.HistoryRead(()))
    shell.now = T0 + 1.5  # the lease comes late
    shell.lease(m.LeaseOutcome.TAKEN)
    for instant in (at(-2), at(-1), at(0)):
        assert instant in claims(shell.actions)
        shell.run(instant)
        shell.finish(instant)
    assert not shell.skips(m.SkipReason.STILL_RUNNING)


def test_an_instant_skipped_behind_a_claim_is_recorded_once_that_claim_runs() -> None:
    shell = Shell(spec(), updated_at=T0 - 0.5)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    assert claims(shell.to(0.0)) == [at(0)]
    out = shell.to(1.0)  # due while at(0)'s claim is on its way
    assert shell.skips(m.SkipReason.STILL_RUNNING) == [at(1)]
    assert not [a for a in out if isinstance(a, m.RecordSkip)]
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 4))
    assert m.Start("job", at(0), "scheduled", 4) in out
    assert m.RecordSkip("job", at(1), "scheduled", m.SkipReason.STILL_RUNNING) in out


def test_an_instant_skipped_behind_another_members_instant_is_due_again() -> None:
    """Regression (scale benchmark, a million jobs, the join): the newcomer had the job's
    lease only once the old owner, late in aligning its moved jobs, let it go; it claimed the
    instant it had waited for, which the old owner had run, and the next instant, due while
    that claim was on its way, was recorded `still-running` behind a run that never was
    (the old owner's had ended before the lease came). It is due again, its successor not."""
    shell = Shell(spec(), updated_at=T0 - 0.5)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.to(1.0)  # at(1) skipped behind at(0)'s claim
    shell.now = T0 + 1.2
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.TAKEN, holder="vm-old"))
    assert claims(out) == [at(1)]
    shell.run(at(1), token=5)
    assert m.Start("job", at(1), "scheduled", 5) in shell.actions
    assert not shell.of(m.RecordSkip)


def test_an_instant_skipped_behind_another_members_instant_past_its_successor_is_recorded() -> None:
    """The same answer after at(2) came due too: at(1) is never started after its successor
    was due (recorded `still-running`), at(2) is due again."""
    shell = Shell(spec(), updated_at=T0 - 0.5)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.to(1.0)
    shell.to(2.0)
    assert shell.skips(m.SkipReason.STILL_RUNNING) == [at(1), at(2)]
    shell.now = T0 + 2.1
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.TAKEN, holder="vm-old"))
    assert m.RecordSkip("job", at(1), "scheduled", m.SkipReason.STILL_RUNNING) in out
    assert claims(out) == [at(2)]
    assert not [a for a in out if isinstance(a, m.RecordSkip) and a.instant == at(2)]


def skipped_behind_a_claim(job: JobSpec) -> Shell:
    """at(1) came due while the claim of at(0) was on its way: skipped, not recorded yet."""
    shell = Shell(job, updated_at=T0 - 0.5)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.to(1.0)
    assert shell.skips(m.SkipReason.STILL_RUNNING) == [at(1)]
    return shell


def reconnected_and_replanned(shell: Shell) -> None:
    """Contact back at 1.8 s: at(0)'s claim never landed; the catch-up is planned."""
    shell.now = T0 + 1.8
    shell.feed(shell.machine.set_session(SESSION, shell.now))
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.ABSENT))
    shell.give(m.HistoryRead(()))
    shell.lease(m.LeaseOutcome.TAKEN)
    assert not shell.of(m.RecordSkip)


def test_an_instant_skipped_behind_a_claim_that_contact_lost_is_caught_up() -> None:
    """Regression (chaos partition, seed 2 again): at(1) came due while the claim of at(0)
    was on its way and was recorded `still-running`; then contact was lost, at(0) was
    withdrawn and caught up, and at(1) stayed recorded as skipped behind a run that never
    was. Now nothing is recorded until the claim starts; lost contact leaves at(1) to the
    catch-up, with at(0)."""
    shell = skipped_behind_a_claim(spec(catchup="all"))
    shell.feed(shell.machine.set_session(None, shell.now))
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.UNKNOWN))
    reconnected_and_replanned(shell)
    assert [(c.instant, c.kind) for c in shell.of(m.Claim)][1:] == [(at(0), "catchup")]  # type: ignore[attr-defined]
    shell.run(at(0))
    shell.finish(at(0))
    assert [(c.instant, c.kind) for c in shell.of(m.Claim)][2:] == [(at(1), "catchup")]  # type: ignore[attr-defined]


def test_an_instant_skipped_behind_a_claim_whose_reply_was_lost_waits_for_its_outcome() -> None:
    """Regression (chaos partition-overlap, CI): at(1) came due while the claim of at(0) was
    on its way; that claim's reply then timed out while the session still looked connected
    (UNKNOWN: no longer holding the job), and at(1) was recorded `still-running` at once.
    Contact was lost next, at(0) withdrawn and caught up: at(1) stayed skipped behind a run
    that never was."""
    shell = skipped_behind_a_claim(spec(catchup="all"))
    assert not shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.UNKNOWN))
    shell.to(1.2)
    assert not shell.of(m.RecordSkip)
    shell.feed(shell.machine.set_session(None, shell.now))
    reconnected_and_replanned(shell)
    assert at(0) in claims(shell.actions[-3:])
    shell.run(at(0), token=2)
    shell.finish(at(0))
    assert [(c.instant, c.kind) for c in shell.of(m.Claim)][-1] == (at(1), "catchup")  # type: ignore[attr-defined]


def test_an_instant_skipped_behind_a_lost_reply_is_recorded_once_that_claim_settles() -> None:
    shell = Shell(spec(), updated_at=T0 - 0.5)
    shell.join()
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.to(1.0)  # at(1) skipped behind at(0)'s claim
    shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.UNKNOWN))
    assert m.Resolve("job", at(0)) in shell.to(1.6)
    assert not shell.of(m.RecordSkip)
    out = shell.give(m.ClaimAnswered(at(0), m.ClaimOutcome.CREATED, 9))  # ours, too late
    assert not [a for a in out if isinstance(a, m.Start)]
    assert m.RecordSkip("job", at(1), "scheduled", m.SkipReason.STILL_RUNNING) in out


def test_a_trigger_goes_before_the_rest_of_a_long_catchup() -> None:
    """Regression (simulator, seed 992): a slow job caught up with `all` had a minute of
    instants queued; a trigger waited behind all of them (over 40 s) although the operator
    was told its owner runs it now. It goes as soon as the run going ends."""
    shell = Shell(spec(schedule="*/2 * * * * *", catchup="all"), updated_at=T0 - 30.5)
    shell.now = T0 + 0.1
    shell.join()
    shell.give(m.HistoryRead(()))
    shell.lease(m.LeaseOutcome.TAKEN)
    first = shell.of(m.Claim)[0].instant  # type: ignore[attr-defined]
    shell.run(first)
    shell.now = T0 + 0.6
    shell.give(m.Triggered("t-1"))
    shell.finish(first)
    kinds = [c.kind for c in shell.of(m.Claim)]  # type: ignore[attr-defined]
    assert kinds == ["catchup", "trigger"], kinds


@pytest.mark.parametrize("changed_at", [x / 4 for x in range(40)])
@pytest.mark.parametrize("catchup", ["all", "latest"])
def test_a_jitter_longer_than_the_period_never_starts_a_missed_instant_after_its_successor(
    changed_at: float, catchup: str
) -> None:
    """Regression (simulator, seeds 109 and 119): a job with a 3 s jitter on a 1 s schedule,
    changed a moment before a member (back from a short loss of contact) activated it: the
    catch-up plan ends at now - jitter, and an instant after that bound that came due
    before the activation was claimed as "scheduled" after its successor was due (a
    backlog; with `latest`, a hole behind it). Such an instant is decided by the catch-up
    policy: `all` runs it as a catch-up, `latest` records it."""
    job = spec(jitter=3.0, catchup=catchup)
    shell = Shell(job, updated_at=T0 + changed_at)
    shell.now = T0 + changed_at + 0.6
    shell.join()
    if shell.of(m.ReadHistory):
        shell.give(m.HistoryRead(()))
    shell.lease(m.LeaseOutcome.TAKEN)
    claimed_at: dict[datetime, float] = {c: shell.now for c in claims(shell.actions)}
    for instant in list(claimed_at):
        shell.run(instant)
        shell.finish(instant)

    def due(i: datetime) -> float:
        return i.timestamp() + jitter_of(fire_key("job", i), 3.0)

    t = shell.now - T0
    while t < changed_at + 10:
        t += 0.05
        for instant in claims(shell.to(t)):
            claimed_at[instant] = shell.now
            shell.run(instant)
            shell.finish(instant)
    kinds = {c.instant: c.kind for c in shell.of(m.Claim)}  # type: ignore[attr-defined]
    for instant, when in claimed_at.items():
        if kinds[instant] == "scheduled":
            deadline = max(due(job.schedule_obj.next_fire(instant)), due(instant))
            assert when <= deadline + 0.05, (instant, when - T0)
