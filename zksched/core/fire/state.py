"""One job's fire state on one member: the fields every part of its machine reads, and
the small steps they share (`job.py` is the machine; `planning.py` plans catch-ups;
`answers.py` takes ZooKeeper's answers)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, NoReturn

from zksched.core.fire import model as m
from zksched.core.fire.stages import (
    BEFORE_START,
    HOLDS_JOB,
    FireStage,
    IllegalTransition,
    JobPhase,
    LeaseStage,
    Step,
    check_lease_move,
    check_phase_move,
    next_stage,
)
from zksched.core.firekey import fire_key, format_utc, jitter_of
from zksched.core.jobspec import JobSpec
from zksched.core.schedule.catchup import CatchupPlan

NEVER = float("inf")
_NOTHING: Mapping[datetime, Any] = MappingProxyType({})
_UNDER_WAY = BEFORE_START - {FireStage.CLAIMING}
# a claim not settled yet: from an earlier connection, it holds the next catch-up's planning
_UNSETTLED = BEFORE_START - {FireStage.LEASING}


@dataclass(frozen=True, slots=True)
class _Plan:
    """A catch-up planned from the job's history, waiting for the skip ranges of its holes."""

    plan: CatchupPlan
    behind: list[datetime]  # holes behind newer records
    after: datetime  # the plan's lower bound


@dataclass(slots=True)
class FireInProgress:
    instant: datetime
    kind: m.FireKind
    stage: FireStage
    deadline: float  # overlap = skip: claimed after this, it would start after its successor
    token: int | None = None
    retry_at: float = NEVER  # LEASING / UNKNOWN / PARKED / BACKING_OFF: when to try again
    trigger: str | None = None  # the trigger it runs
    epoch: int = 0  # the job's connection epoch when it was claimed
    started_at: float = NEVER  # when its command started here
    attempt: int = 1  # its command's attempt (retries: `retries`)
    last_status: str = ""  # BACKING_OFF: how the last attempt ended
    retry_by: float = NEVER  # BACKING_OFF, overlap = skip: no attempt starts from then on

    def step(self, step: Step) -> None:
        self.stage = next_stage(self.stage, step)


class JobState:
    """The state of one job's fires; the machine's parts are mixins over it.

    A member holds one per owned job (100,000s in a big cluster): slots, no instance dict."""

    __slots__ = (
        "_active_since",
        "_ahead_for",
        "_gap",
        "_give_back",
        "_holder",
        "_last_run",
        "_last_trigger",
        "_next",
        "_next_due",
        "_orphans_due",
        "_out",
        "_pending_plan",
        "_plan_lower",
        "_plan_retry",
        "_plan_until",
        "_plan_waits",
        "_queue_",
        "_reruns_",
        "_take",
        "_takes",
        "_trigger_at",
        "_triggers_",
        "_unrecorded_",
        "_waiting_",
        "_withdrawals_",
        "epoch",
        "fires",
        "last_active",
        "lease",
        "owned",
        "phase",
        "session",
        "spec",
        "tunables",
        "updated_at",
        "wake_at",
    )

    def __init__(
        self,
        spec: JobSpec,
        updated_at: float,
        tunables: m.FireTunables,
        last_active: float | None = None,
        takes: Iterator[int] | None = None,
    ) -> None:
        self.spec = spec
        self.updated_at = updated_at
        self.tunables = tunables
        self.phase = JobPhase.INACTIVE  # moved only by `_enter` from here on
        self.lease = LeaseStage.FREE
        # lease takes are numbered member-wide (a forgotten machine's take may still answer):
        # `_take` is the newest; TAKING waits for its answer, HELD holds what it got
        self._takes = takes if takes is not None else itertools.count(1)
        self._take = 0
        self.owned = False
        self.session: int | None = None
        # counts this member's losses of contact: a fire claimed in an earlier epoch was
        # interrupted (its claim is withdrawn, never started)
        self.epoch = 0
        self.last_active = last_active  # when this member last had the job active
        self.fires: dict[datetime, FireInProgress] = {}
        # the actions of the call under way; made by its first (most calls have none)
        self._out: list[m.Action] | None = None
        self._next: datetime | None = None  # the next scheduled instant not yet due
        self._next_due = NEVER
        self._ahead_for: datetime | None = None  # the instant a lease was taken ahead for
        self._give_back = False  # give the lease back once no fire holds it
        # The collections below are empty for almost every job (a member may own 300,000):
        # each is None until it holds something, and read through a property that gives an
        # empty tuple meanwhile (`_queue`); `_queue_list()` and the like make it to change.
        # catch-up, oldest first
        self._queue_: list[tuple[datetime, m.FireKind]] | None = None
        self._triggers_: list[str] | None = None
        self._trigger_at = 0.0  # triggers wait until then (a retry, or the next second)
        self._last_trigger: datetime | None = None
        # who held the lease at the last answer, and whether a run of theirs was going
        self._holder: tuple[str, bool] = ("another member", False)
        self._gap: datetime | None = None  # the first instant left waiting for the lease
        self._plan_lower = self._plan_until = 0.0
        self._plan_retry = NEVER
        self._plan_waits = False  # planning waits for interrupted claims to settle
        self._pending_plan: _Plan | None = None
        self._waiting_: list[datetime] | None = None  # scheduled instants due while planning
        # instants skipped `still-running` while only a claim held the job: recorded once
        # it starts (or settles otherwise), caught up if contact is lost first
        self._unrecorded_: list[datetime] | None = None
        # instants whose claim we withdrew and that have no record of ours since: if the job
        # leaves this member before its catch-up claims or records them, they are recorded
        # (a new owner's history read may have seen the claim before it was withdrawn)
        # (a dict as a set, ordered)
        self._withdrawals_: dict[datetime, None] | None = None
        # at-least-once: orphaned claims queued to be run again -> the attempt they run as
        self._reruns_: dict[datetime, int] | None = None
        self._orphans_due = NEVER  # when to look for orphaned claims next (while active)
        self._active_since = 0.0  # when the job last became active here (planning began)
        self._last_run = NEVER  # how long the job's last command here ran (NEVER: unknown)
        self.wake_at = NEVER

    @property
    def _queue(self) -> Sequence[tuple[datetime, m.FireKind]]:
        return self._queue_ or ()

    def _queue_list(self) -> list[tuple[datetime, m.FireKind]]:
        if self._queue_ is None:
            self._queue_ = []
        return self._queue_

    @property
    def _triggers(self) -> Sequence[str]:
        return self._triggers_ or ()

    def _triggers_list(self) -> list[str]:
        if self._triggers_ is None:
            self._triggers_ = []
        return self._triggers_

    @property
    def _waiting(self) -> Sequence[datetime]:
        return self._waiting_ or ()

    def _waiting_list(self) -> list[datetime]:
        if self._waiting_ is None:
            self._waiting_ = []
        return self._waiting_

    @property
    def _unrecorded(self) -> Sequence[datetime]:
        return self._unrecorded_ or ()

    def _unrecorded_list(self) -> list[datetime]:
        if self._unrecorded_ is None:
            self._unrecorded_ = []
        return self._unrecorded_

    @property
    def _withdrawals(self) -> Mapping[datetime, None]:
        return self._withdrawals_ or _NOTHING

    def _withdrawals_dict(self) -> dict[datetime, None]:
        if self._withdrawals_ is None:
            self._withdrawals_ = {}
        return self._withdrawals_

    @property
    def _reruns(self) -> Mapping[datetime, int]:
        return self._reruns_ or _NOTHING

    def _reruns_dict(self) -> dict[datetime, int]:
        if self._reruns_ is None:
            self._reruns_ = {}
        return self._reruns_

    def _emit(self, action: m.Action) -> None:
        if self._out is None:
            self._out = [action]
        else:
            self._out.append(action)

    @property
    def in_hand(self) -> bool:
        """A fire or the job's lease in hand: what a member taking the job over waits for."""
        return bool(self.fires) or self.lease is not LeaseStage.FREE

    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing held, nothing to do: the machine may be forgotten."""
        return (
            self.phase in (JobPhase.INACTIVE, JobPhase.DELETED)
            and not self.fires
            and self.lease is LeaseStage.FREE
            and not self._triggers
            and not self._withdrawals
            and (not self.owned or self.phase is JobPhase.DELETED)
        )

    def pending_since(self) -> datetime | None:
        """The oldest instant this machine has in hand without a final record yet (queued
        for a catch-up, in flight, left for a catch-up, being planned); None: none."""
        times = [i for i, _ in self._queue] + list(self.fires) + list(self._waiting)
        if self._gap is not None:
            times.append(self._gap)
        if self.phase is JobPhase.PLANNING:
            times.append(_utc(self._plan_lower))
        return min(times, default=None)

    @property
    def holding(self) -> bool:
        return any(f.stage in HOLDS_JOB for f in self.fires.values())

    @property
    def _outcome_pending(self) -> bool:
        """A claim of ours whose outcome is not known yet (its reply lost, being resolved,
        parked, being withdrawn): it may still start, or come to nothing."""
        return any(f.stage in _UNSETTLED for f in self.fires.values())

    @property
    def _active(self) -> bool:
        return self.owned and self.session is not None and self.phase is not JobPhase.DELETED

    def _busy(self) -> bool:
        """Something of the job is under way (for overlap = skip, catch-ups and triggers
        wait for it): a run, a lease being waited for, a claim not settled yet."""
        return self.holding or any(f.stage in _UNDER_WAY for f in self.fires.values())

    def _catching_up(self) -> bool:
        """A catch-up's instant is in hand and has not ended yet."""
        return any(
            f.kind == "catchup" and f.stage is not FireStage.WRITING for f in self.fires.values()
        )

    def _interrupted(self, fire: FireInProgress) -> bool:
        """Whether contact was lost since the fire's claim was sent."""
        return fire.epoch != self.epoch

    def _unsettled(self) -> bool:
        """Whether an interrupted claim has not settled yet: until it has, a catch-up cannot
        tell whether its instant has a record (it may be withdrawn)."""
        return any(f.stage in _UNSETTLED and self._interrupted(f) for f in self.fires.values())

    def _set_session(self, session: int | None) -> None:
        if session is None and self.session is not None:
            self.epoch += 1
        self.session = session

    def _lease_in_use(self) -> bool:
        return any(
            f.stage in HOLDS_JOB or f.stage in (FireStage.WRITING, FireStage.LEASING)
            for f in self.fires.values()
        ) or (self._active and self.spec.overlap == "skip" and bool(self._queue))

    def _fire(self, instant: datetime) -> FireInProgress:
        fire = self.fires.get(instant)
        if fire is None:
            raise_illegal(f"no fire of {self.spec.name} at {format_utc(instant)}")
        return fire

    def _key(self, fire: FireInProgress) -> str:
        return fire_key(self.spec.name, fire.instant)

    def _write(
        self,
        fire: FireInProgress,
        status: str,
        reason: m.SkipReason | None = None,
        error: str | None = None,
    ) -> None:
        self._emit(m.WriteResult(self.spec.name, fire.instant, status, reason, error))

    def _drop(
        self,
        fire: FireInProgress,
        reason: m.SkipReason | None,
        detail: str,
        record: bool | None = None,
    ) -> None:
        """Forget a fire that left nothing of ours behind, and say why it did not run. A
        trigger's goes back to wait for its turn (it runs once: at a later second when its
        instant turned out another fire's, say another member's trigger in the same second)."""
        fire.step(Step.DROPPED)
        del self.fires[fire.instant]
        if fire.trigger is not None:
            self._triggers_list().insert(0, fire.trigger)
            return
        if reason is not None:
            keep = reason is m.SkipReason.STILL_RUNNING if record is None else record
            keep = keep and self.session is not None
            self._skip(fire.instant, reason, record=keep, detail=detail)

    def _skip(
        self, instant: datetime, reason: m.SkipReason, record: bool, detail: str = ""
    ) -> None:
        self._emit(m.Skip(self.spec.name, instant, reason, detail))
        if record and self._withdrawals_:
            self._withdrawals_.pop(instant, None)
        if record:
            self._emit(m.RecordSkip(self.spec.name, instant, "scheduled", reason))

    def _trigger_again(self, fire: FireInProgress) -> None:
        """A trigger's fire that did not run: the trigger waits for its turn again (it runs
        once)."""
        if fire.trigger is not None:
            self._triggers_list().insert(0, fire.trigger)

    def _record_still_running(self) -> None:
        for instant in self._unrecorded:
            if self.session is not None:
                self._emit(
                    m.RecordSkip(self.spec.name, instant, "scheduled", m.SkipReason.STILL_RUNNING)
                )
        self._unrecorded_ = None

    def _lease_to(self, stage: LeaseStage) -> None:
        self.lease = check_lease_move(self.lease, stage)

    def _enter(self, phase: JobPhase) -> None:
        self.phase = check_phase_move(self.phase, phase)

    # -- provided by the machine (job.py) and its parts ------------------------------------

    def _claim(self, fire: FireInProgress, now: float) -> None:
        raise NotImplementedError

    def _pump(self, now: float) -> None:
        raise NotImplementedError

    def _due(self, instant: datetime, kind: m.FireKind, due: float, now: float) -> None:
        raise NotImplementedError

    def _set_next(self, after: datetime) -> None:
        raise NotImplementedError

    def _deadline(self, instant: datetime, kind: m.FireKind, due: float) -> float:
        raise NotImplementedError

    def _activate(self, now: float) -> None:
        raise NotImplementedError

    def _catch_up_gap(self, now: float) -> None:
        raise NotImplementedError

    def _attempt_again(self, fire: FireInProgress, now: float) -> None:
        raise NotImplementedError

    def _give_up_retries(self, why: str) -> None:
        raise NotImplementedError


def raise_illegal(text: str) -> NoReturn:
    raise IllegalTransition(text)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def due_of(spec: JobSpec, instant: datetime) -> float:
    """When an instant of the job comes due: the instant plus its own jitter."""
    if spec.jitter <= 0:
        return instant.timestamp()
    return instant.timestamp() + jitter_of(fire_key(spec.name, instant), spec.jitter)


def plan_lower(spec: JobSpec, updated_at: float, last_active: float | None) -> float:
    """The catch-up's lower bound: instants after it may be missed (after the job's change,
    and after the moment it was last active here, less a second and its jitter)."""
    lower = updated_at if last_active is None else last_active - 1 - spec.jitter
    return max(lower, updated_at)


def _latest(spec: JobSpec, lower: float, now: float) -> datetime | None:
    if lower >= now:
        return None
    return spec.schedule_obj.latest_fire(_utc(lower), _utc(now))
