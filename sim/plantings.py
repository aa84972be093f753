"""Bugs planted in the fire core on purpose, to show that the simulator catches them.

Each planting patches one decision of `JobFireMachine` for as long as its context lasts (in
the process that runs the simulation). `scripts/simulate --plant NAME` runs seeds with it
until a seed fails, and prints the seed and the violation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from zksched.core.fire import model as m
from zksched.core.fire.job import FireInProgress, JobFireMachine
from zksched.core.fire.stages import FireStage, Step


def _catchup_without_claim(self: JobFireMachine, fire: FireInProgress, now: float) -> None:
    """A catch-up's instant is started without a claim (as if the create had answered)."""
    self.fires[fire.instant] = fire
    if fire.kind == "catchup":
        fire.stage = FireStage.STARTING
        self._out.append(m.Start(self.spec.name, fire.instant, fire.kind, 0))
        return
    _ORIGINAL["_claim"](self, fire, now)


def _holding_ignored(self: JobFireMachine) -> bool:
    """`still-running` is never seen: an instant due while a run holds the job goes on."""
    return False


def _runs_ignored(self: JobFireMachine, fire: FireInProgress, now: float, late: bool) -> Any:
    """...nor when its claim comes back: the previous run of the job is ignored entirely."""
    fires, self.fires = self.fires, {fire.instant: fire}
    try:
        return _ORIGINAL["_refuse_start"](self, fire, now, late)
    finally:
        self.fires = fires


def _unpaused(name: str) -> Callable[..., Any]:
    """`name` decides as if the job were not paused (its instants are fired anyway)."""

    def decide(self: JobFireMachine, *args: Any, **kwargs: Any) -> Any:
        spec = self.spec
        if not spec.paused:
            return _ORIGINAL[name](self, *args, **kwargs)
        self.spec = dataclasses.replace(spec, paused=False)
        try:
            return _ORIGINAL[name](self, *args, **kwargs)
        finally:
            self.spec = spec

    return decide


def _no_loss_guard(self: JobFireMachine, now: float) -> list[m.Action]:
    """The session-loss guard is off: runs go on and the lease is still believed held."""
    self.session = None
    return self._finish(now)


def _lost_reply_is_failure(self: JobFireMachine, event: m.ClaimAnswered, now: float) -> None:
    """A lost claim reply is taken for "not created": the instant is claimed again at once,
    as if nothing had landed (its first create may have, and run elsewhere... or here)."""
    if event.outcome is m.ClaimOutcome.UNKNOWN:
        fire = self._fire(event.instant)
        fire.step(Step.UNKNOWN)
        fire.step(Step.RESOLVE_SENT)
        event = m.ClaimAnswered(event.instant, m.ClaimOutcome.ABSENT)
    _ORIGINAL["_claim_answered"](self, event, now)


_TOKENS = itertools.count(10**12)  # unique, as ZooKeeper's would be


def _unknown_taken_as_ours(self: JobFireMachine, event: m.ClaimAnswered, now: float) -> None:
    """A claim whose reply was lost is taken for ours and started, unresolved (its create
    may not have landed, and another member may claim and run the instant too)."""
    if event.outcome is m.ClaimOutcome.UNKNOWN:
        event = m.ClaimAnswered(event.instant, m.ClaimOutcome.CREATED, next(_TOKENS))
    _ORIGINAL["_claim_answered"](self, event, now)


def _catchup_ignores_window(self: JobFireMachine, now: float) -> None:
    """The catch-up runs every missed instant, whatever the policy and window."""
    plan = self._pending_plan
    if plan is not None:
        from zksched.core.schedule.catchup import CatchupPlan

        instants = tuple(self.spec.schedule_obj.fires_between(plan.after, _utc(self._plan_until)))
        self._pending_plan = type(plan)(CatchupPlan(instants[-200:], 0), plan.behind, plan.after)
    _ORIGINAL["_apply_plan"](self, now)


def _utc(epoch: float) -> datetime:
    from datetime import UTC

    return datetime.fromtimestamp(epoch, UTC)


def _plans_before_withdrawals(self: JobFireMachine) -> bool:
    """The catch-up is planned at once on reconnecting, without waiting for the claims that
    contact was lost under: it sees their records, which are then withdrawn."""
    return False


def _retry_past_successor(self: JobFireMachine, fire: FireInProgress, at: float) -> str | None:
    """A retry ignores the job: it starts whenever its pause is over (past the instant's
    successor, beside its next run, after the job moved)."""
    return None


def _retry_after_success(
    self: JobFireMachine, fire: FireInProgress, status: str, now: float
) -> bool:
    """A run that ended ok is retried too (the job runs the instant again)."""
    return bool(_ORIGINAL["_retry_later"](self, fire, "failed" if status == "ok" else status, now))


def _orphans_ignored(self: JobFireMachine, orphans: Any, limit: datetime) -> None:
    """Orphaned claims of at-least-once jobs are never run again (at most once for all)."""


_ORIGINAL: dict[str, Callable[..., Any]] = {
    name: getattr(JobFireMachine, name)
    for name in (
        "_claim",
        "_refuse_start",
        "_claim_answered",
        "_apply_plan",
        "_due",
        "_retry_later",
    )
}

PLANTINGS: dict[str, list[tuple[str, Any]]] = {
    "catchup-without-claim": [("_claim", _catchup_without_claim)],
    "still-running-ignored": [
        ("holding", property(_holding_ignored)),
        ("_refuse_start", _runs_ignored),
    ],
    "paused-fired": [("_due", _unpaused("_due")), ("_refuse_start", _unpaused("_refuse_start"))],
    "session-loss-guard-off": [("session_lost", _no_loss_guard)],
    "lost-reply-as-failure": [("_claim_answered", _lost_reply_is_failure)],
    "unknown-taken-as-ours": [("_claim_answered", _unknown_taken_as_ours)],
    "catchup-ignores-window": [("_apply_plan", _catchup_ignores_window)],
    "plans-before-withdrawals": [("_unsettled", _plans_before_withdrawals)],
    "retry-past-successor": [("_no_retry", _retry_past_successor)],
    "retry-after-success": [("_retry_later", _retry_after_success)],
    "orphans-ignored": [("_queue_reruns", _orphans_ignored)],
}


@contextlib.contextmanager
def planted(name: str) -> Iterator[None]:
    patches = PLANTINGS[name]
    # what the class itself defines (None: inherited from one of its parts)
    originals = [(attribute, JobFireMachine.__dict__.get(attribute)) for attribute, _ in patches]
    for attribute, replacement in patches:
        setattr(JobFireMachine, attribute, replacement)
    try:
        yield
    finally:
        for attribute, original in originals:
            if original is None:
                delattr(JobFireMachine, attribute)
            else:
                setattr(JobFireMachine, attribute, original)
