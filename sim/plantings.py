"""Bugs planted on purpose, to show that the simulator catches them: in the fire core (one
decision of `JobFireMachine`) and in the production fire shell (`ZkActions`, `LeaseIO`).

Each planting patches its class for as long as its context lasts (in the process that runs
the simulation); nothing in zksched knows of them. `scripts/simulate --plant NAME` runs
seeds with it until a seed fails, and prints the seed and the violation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from sim.records import record_at
from zksched.core.fire import model as m
from zksched.core.fire.job import FireInProgress, JobFireMachine
from zksched.core.fire.stages import FireStage, Step
from zksched.runtime.fire.leases import LeaseIO
from zksched.runtime.fire.stores import HeldLease
from zksched.runtime.fire.zk_actions import ZkActions
from zksched.zk.claims import AlreadyClaimed, Claimed
from zksched.zk.locks import LockAttempt


def _catchup_without_claim(self: JobFireMachine, fire: FireInProgress, now: float) -> None:
    """A catch-up's instant is started without a claim (as if the create had answered)."""
    self.fires[fire.instant] = fire
    if fire.kind == "catchup":
        fire.stage = FireStage.STARTING
        self._emit(m.Start(self.spec.name, fire.instant, fire.kind, 0))
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


def _orphans_ignored(self: JobFireMachine, orphans: Any, limit: datetime) -> list[datetime]:
    """Orphaned claims of at-least-once jobs are never run again (at most once for all)."""
    return []


# -- the fire shell --------------------------------------------------------------------------


def _taken_as_created(
    self: ZkActions, job: str, instant: datetime, found: Claimed | AlreadyClaimed
) -> None:
    """A claim's "taken" answer (another member's record at the instant) is taken for
    "created": the fire starts under that record."""
    if isinstance(found, AlreadyClaimed) and found.record is not None:
        record = found.record
        token = record.fencing_token or 0
        found = Claimed(record_at(job, record.scheduled), record, token)
    _SHELL["_answer"](self, job, instant, found)


class _NoLock:
    def on_lost(self, callback: Callable[[], None] | None) -> None:
        return None

    def release_ops(self) -> str | None:
        return None

    def released(self) -> None:
        return None


def _busy_as_taken(
    self: LeaseIO,
    job: str,
    take: int,
    attempt: LockAttempt,
    lock: HeldLease | None,
    holder: str | None,
    may_leave_orphan: bool,
) -> None:
    """A lease take that found another holder is answered "taken": the job runs without
    its lease, beside the holder's run."""
    if attempt is LockAttempt.HELD:
        attempt, lock = LockAttempt.ACQUIRED, _NoLock()
    _SHELL["_taken"](self, job, take, attempt, lock, holder, may_leave_orphan)


_SHELL: dict[str, Callable[..., Any]] = {"_answer": ZkActions._answer, "_taken": LeaseIO._taken}

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

Patch = tuple[type, str, Any]  # class, attribute, what replaces it
J = JobFireMachine

PLANTINGS: dict[str, list[Patch]] = {
    # the fire core
    "catchup-without-claim": [(J, "_claim", _catchup_without_claim)],
    "still-running-ignored": [
        (J, "holding", property(_holding_ignored)),
        (J, "_refuse_start", _runs_ignored),
    ],
    "paused-fired": [
        (J, "_due", _unpaused("_due")),
        (J, "_refuse_start", _unpaused("_refuse_start")),
    ],
    "session-loss-guard-off": [(J, "session_lost", _no_loss_guard)],
    "lost-reply-as-failure": [(J, "_claim_answered", _lost_reply_is_failure)],
    "unknown-taken-as-ours": [(J, "_claim_answered", _unknown_taken_as_ours)],
    "catchup-ignores-window": [(J, "_apply_plan", _catchup_ignores_window)],
    "plans-before-withdrawals": [(J, "_unsettled", _plans_before_withdrawals)],
    "retry-past-successor": [(J, "_no_retry", _retry_past_successor)],
    "retry-after-success": [(J, "_retry_later", _retry_after_success)],
    "orphans-ignored": [(J, "_queue_reruns", _orphans_ignored)],
    # the fire shell
    "taken-as-created": [(ZkActions, "_answer", _taken_as_created)],
    "lease-busy-as-taken": [(LeaseIO, "_taken", _busy_as_taken)],
}
SHELL_PLANTINGS = ("taken-as-created", "lease-busy-as-taken")


@contextlib.contextmanager
def planted(name: str) -> Iterator[None]:
    patches = PLANTINGS[name]
    # what the class itself defines (None: inherited from one of its parts)
    originals = [(cls, attribute, cls.__dict__.get(attribute)) for cls, attribute, _ in patches]
    for cls, attribute, replacement in patches:
        setattr(cls, attribute, replacement)
    try:
        yield
    finally:
        for cls, attribute, original in originals:
            if original is None:
                delattr(cls, attribute)
            else:
                setattr(cls, attribute, original)
