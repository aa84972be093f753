"""At-least-once delivery (`delivery = "at-least-once"`): the fire core's decisions. An
orphan is a claim whose record says `running` while its claimer's session is gone (the
shell finds them when the job's history is read: zk/redelivery.py)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest
from fire_shell import T0, Shell, at, claims, spec

from zksched.core.fire import model as m

ALO = {"delivery": "at-least-once", "overlap": "allow", "schedule": "*/10 * * * * *"}


def joined(**changes: object) -> tuple[Shell, list[m.Action]]:
    """An at-least-once job changed an hour ago, taken by a member that just joined."""
    shell = Shell(spec(**{**ALO, **changes}), updated_at=T0 - 3600)
    return shell, shell.join()


def planned(
    shell: Shell, instants: tuple[datetime, ...], orphans: tuple[tuple[datetime, int], ...]
) -> list[m.Action]:
    """Answer the job's history read (and the skip ranges of its holes: none)."""
    out = shell.give(m.HistoryRead(instants, orphans=orphans))
    if any(isinstance(a, m.ReadRanges) for a in out):
        out += shell.give(m.RangesRead(()))
    return out


def test_taking_an_at_least_once_job_asks_for_its_orphans_inside_the_window() -> None:
    _shell, out = joined(catchup_window=60.0)
    (read,) = [a for a in out if isinstance(a, m.ReadHistory)]
    assert read.orphans_since is not None
    assert abs((read.orphans_since - at(-60.5)).total_seconds()) < 1.0


def test_an_at_most_once_job_never_asks_for_orphans() -> None:
    _shell, out = joined(delivery="at-most-once")
    assert [a.orphans_since for a in out if isinstance(a, m.ReadHistory)] == [None]


def test_a_job_changed_just_now_still_looks_for_orphans() -> None:
    """No instant of its own to catch up, but a claim of the old spec may be orphaned."""
    shell = Shell(spec(**ALO), updated_at=T0 - 0.2)
    out = shell.join()
    assert [a for a in out if isinstance(a, m.ReadHistory)]


def test_an_orphan_is_claimed_again_as_the_next_attempt_and_started_as_it() -> None:
    shell, _ = joined()
    out = planned(shell, (at(-30), at(-20)), ((at(-20), 1),))
    (claim,) = [a for a in out if isinstance(a, m.Claim) and a.instant == at(-20)]
    assert (claim.attempt, claim.late) == (2, True)
    out = shell.give(m.ClaimAnswered(at(-20), m.ClaimOutcome.CREATED, 99))
    assert out == [m.Start("job", at(-20), "catchup", 99, 2)]


def test_an_orphan_claimed_again_by_another_member_first_is_not_run() -> None:
    shell, _ = joined()
    planned(shell, (at(-20),), ((at(-20), 3),))
    out = shell.give(m.ClaimAnswered(at(-20), m.ClaimOutcome.TAKEN, holder="m2"))
    assert not [a for a in out if isinstance(a, m.Start)]
    assert shell.skips(m.SkipReason.ALREADY_CLAIMED) == [at(-20)]


def test_orphans_are_run_before_the_missed_instants_in_order() -> None:
    shell, _ = joined(catchup="all", catchup_window=60.0)
    out = planned(shell, (at(-40),), ((at(-40), 1),))
    assert claims(out) == sorted(claims(out)) and at(-40) in claims(out)
    attempts = {a.instant: a.attempt for a in out if isinstance(a, m.Claim)}
    assert attempts.pop(at(-40)) == 2 and set(attempts.values()) == {1}


def test_an_at_most_once_job_never_runs_an_orphan_again() -> None:
    shell, _ = joined(delivery="at-most-once")
    out = planned(shell, (at(-20),), ((at(-20), 1),))
    assert at(-20) not in claims(out)


def test_a_fire_of_our_own_in_hand_is_not_an_orphan() -> None:
    """A record of ours whose marker the shell did not see (read as the result was being
    written, say) while its fire is still in hand here: its result is ours to write."""
    shell, _ = joined()
    planned(shell, (), ())
    shell.to(0.0)
    shell.run(at(0))
    changed = dataclasses.replace(shell.machine.spec, history=30)
    out = shell.feed(shell.machine.set_spec(changed, T0 + 0.1, shell.now))
    assert [a for a in out if isinstance(a, m.ReadHistory)]  # planned again, the run goes on
    out = planned(shell, (at(0),), ((at(0), 1),))
    assert at(0) not in claims(out)


@pytest.mark.parametrize("on_loss", ["terminate", "continue"])
def test_runs_of_an_at_least_once_job_stop_when_the_session_may_be_gone(on_loss: str) -> None:
    """Its claim may be run again once the session is gone: never beside the first run,
    whatever `on_session_loss` says for at-most-once jobs."""
    shell = Shell(spec(**ALO), updated_at=T0, on_session_loss=on_loss)
    shell.join()
    shell.give(m.HistoryRead(()))
    shell.to(0.0)
    shell.run(at(0))
    out = shell.feed(shell.machine.session_lost(shell.now))
    assert m.Terminate("job", at(0), "session lost") in out


def test_an_orphan_past_the_window_by_its_turn_is_left_to_history() -> None:
    shell, _ = joined(catchup_window=30.0)
    shell.now = T0 + 40
    out = planned(shell, (at(-20),), ((at(-20), 1),))
    assert at(-20) not in claims(out)
    assert at(-20) in shell.skips(m.SkipReason.OUTSIDE_CATCHUP_WINDOW)


def test_an_active_owner_looks_for_orphans_every_interval_and_runs_them() -> None:
    """A member that had handed the job over dies with a run going: no takeover here, so
    the owner finds the orphan by looking again, and runs it."""
    shell = Shell(spec(**ALO), updated_at=T0, orphan_interval=10.0)
    shell.join()
    planned(shell, (), ())
    assert not shell.of(m.FindOrphans)
    out = shell.to(10.0)
    (find,) = [a for a in out if isinstance(a, m.FindOrphans)]
    assert abs((find.since - at(10.0 - 60.0)).total_seconds()) < 1.0
    assert not [a for a in shell.to(15.0) if isinstance(a, m.FindOrphans)]  # one at a time
    out = shell.give(m.OrphansFound(((at(-30), 1),)))
    (claim,) = [a for a in out if isinstance(a, m.Claim) and a.instant == at(-30)]
    assert claim.attempt == 2
    assert [a for a in shell.to(25.5) if isinstance(a, m.FindOrphans)]  # 10 s after the answer


def test_an_orphan_look_never_answered_is_asked_again() -> None:
    shell = Shell(spec(**ALO), updated_at=T0, orphan_interval=10.0, answer_deadline=30.0)
    shell.join()
    planned(shell, (), ())
    assert [a for a in shell.to(10.0) if isinstance(a, m.FindOrphans)]
    assert not [a for a in shell.to(39.0) if isinstance(a, m.FindOrphans)]  # one at a time
    assert [a for a in shell.to(40.5) if isinstance(a, m.FindOrphans)]  # not for ever


def test_an_at_most_once_job_never_looks_for_orphans() -> None:
    shell = Shell(spec(**{**ALO, "delivery": "at-most-once"}), updated_at=T0)
    shell.join()
    for second in range(0, 40, 5):
        shell.to(float(second))
    assert not shell.of(m.FindOrphans)


def test_an_orphan_waits_for_a_run_going_and_is_not_dropped_by_latest() -> None:
    """Regression (simulator seed 585): an orphan found while a run held an overlap = skip
    job was skipped `still-running` by the next due instant (`latest` drops the rest of a
    catch-up), and never queued again."""
    shell = Shell(
        spec(delivery="at-least-once", schedule="* * * * * *", catchup="latest"),
        updated_at=T0,
        orphan_interval=10.0,
    )
    shell.join()
    planned(shell, (), ())
    shell.lease(m.LeaseOutcome.TAKEN)
    shell.to(0.0)
    shell.run(at(0))  # a long run holds the job
    shell.to(10.0)
    shell.give(m.OrphansFound(((at(-5), 1),)))
    shell.to(11.0)  # the next instant: skipped still-running, the orphan waits
    assert at(-5) not in shell.skips(m.SkipReason.STILL_RUNNING)
    out = shell.give(m.Exited(at(0), "ok"))
    out += shell.give(m.ResultWritten(at(0)))
    (claim,) = [a for a in out if isinstance(a, m.Claim) and a.instant == at(-5)]
    assert claim.attempt == 2


def test_an_orphan_found_again_after_its_claim_was_taken_is_queued_again() -> None:
    """Another member claimed it again first, then died too: found again, run again."""
    shell = Shell(spec(**ALO), updated_at=T0, orphan_interval=10.0)
    shell.join()
    planned(shell, (), ())
    shell.to(10.0)
    out = shell.give(m.OrphansFound(((at(-5), 1),)))
    assert [a.attempt for a in out if isinstance(a, m.Claim) and a.instant == at(-5)] == [2]
    shell.give(m.ClaimAnswered(at(-5), m.ClaimOutcome.TAKEN, holder="m2"))
    shell.to(20.5)
    out = shell.give(m.OrphansFound(((at(-5), 2),)))
    assert [a.attempt for a in out if isinstance(a, m.Claim) and a.instant == at(-5)] == [3]
