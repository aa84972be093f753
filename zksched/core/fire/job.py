"""One job's fires on one member: a pure state machine (events in, actions out).

Every kind of fire (scheduled, catch-up, trigger, the retry of a claim whose reply was lost)
goes the same way: due -> [lease] -> claim -> start -> exit -> result. The job's phase:

    INACTIVE   not ours, or not connected: nothing is claimed or started
    PLANNING   just became ours: its history is being read to plan the catch-up
    ACTIVE     ours: instants are fired as they come due
    DELETED    gone from the table: what is in flight finishes, nothing new starts

Invariants (checked by the cluster simulator, zksched/sim):
- A command starts only after our claim was created, while connected in its session.
- overlap = skip: an instant is started only under the job's lease and while no other fire
  of the job holds the job (`HOLDS_JOB`); an instant due meanwhile is skipped
  `still-running` and recorded, never queued. A scheduled instant whose successor is due
  before it could claim is skipped, not run late.
- A job's instants are claimed in instant order: none is (re)claimed after a later one.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NoReturn

from zksched.core.catchup import (
    CatchupPlan,
    holes,
    newest_scheduled,
    next_records,
    outside_ranges,
    plan_catchup,
    trigger_instant,
    unpruned,
)
from zksched.core.fire import model as m
from zksched.core.fire.stages import (
    COMMAND_UP,
    HOLDS_JOB,
    FireStage,
    IllegalTransition,
    LeaseStage,
    Step,
    check_lease_move,
    next_stage,
)
from zksched.core.firekey import fire_key, format_utc, jitter_of
from zksched.core.jobspec import JobSpec
from zksched.core.schedule import ScheduleError

_NEVER = float("inf")
_MICRO = timedelta(microseconds=1)


class JobPhase(enum.Enum):
    INACTIVE = "inactive"
    PLANNING = "planning"
    ACTIVE = "active"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class _Plan:
    """A catch-up planned from the job's history, waiting for the skip ranges of its holes."""

    plan: CatchupPlan
    behind: list[datetime]  # holes behind newer records
    after: datetime  # the plan's lower bound


@dataclass(slots=True)
class Fire:
    instant: datetime
    kind: m.FireKind
    stage: FireStage
    deadline: float  # overlap = skip: claimed after this, it would start after its successor
    token: int | None = None
    retry_at: float = _NEVER  # LEASING / UNKNOWN: when to try again
    trigger: str | None = None  # the trigger it runs

    def step(self, step: Step) -> None:
        self.stage = next_stage(self.stage, step)


class JobFireMachine:
    def __init__(
        self,
        spec: JobSpec,
        updated_at: float,
        tunables: m.FireTunables,
        last_active: float | None = None,
    ) -> None:
        self.spec = spec
        self.updated_at = updated_at
        self.tunables = tunables
        self.phase = JobPhase.INACTIVE
        self.lease = LeaseStage.FREE
        self.owned = False
        self.session: int | None = None
        self.last_active = last_active  # when this member last had the job active
        self.fires: dict[datetime, Fire] = {}
        self._out: list[m.Action] = []
        self._next: datetime | None = None  # the next scheduled instant not yet due
        self._next_due = _NEVER
        self._ahead_for: datetime | None = None  # the instant a lease was taken ahead for
        self._give_back = False  # give the lease back once no fire holds it
        self._last_claimed: datetime | None = None
        self._queue: deque[tuple[datetime, m.FireKind]] = deque()  # catch-up, oldest first
        self._triggers: deque[str] = deque()
        self._trigger_at = 0.0  # triggers wait until then (a retry, or the next second)
        self._last_trigger: datetime | None = None
        # who held the lease at the last answer, and whether a run of theirs was going
        self._holder: tuple[str, bool] = ("another member", False)
        self._gap: datetime | None = None  # the first instant left waiting for the lease
        self._plan_lower = self._plan_until = 0.0
        self._plan_retry = _NEVER
        self._pending_plan: _Plan | None = None
        self._waiting: list[datetime] = []  # scheduled instants due while planning
        self.wake_at = _NEVER

    # -- inputs ---------------------------------------------------------------------------

    def set_owned(self, owned: bool, now: float) -> list[m.Action]:
        self.owned = owned
        if not owned and self.lease is not LeaseStage.FREE:
            self._give_back = True
        return self._finish(now)

    def set_session(self, session: int | None, now: float) -> list[m.Action]:
        self.session = session
        return self._finish(now)

    def set_spec(self, spec: JobSpec, updated_at: float, now: float) -> list[m.Action]:
        """A changed job: planned again from its change (instants before it were not due
        under this spec); fires in flight go on."""
        self._advance(now)
        if self.phase in (JobPhase.ACTIVE, JobPhase.PLANNING):
            self._deactivate(now, drop_lease=False)
        self.spec, self.updated_at = spec, updated_at
        # planned from the change itself: its instants were due from then, however late
        # this member learned of it
        self.last_active = None
        self._next = None
        return self._finish(now)

    def delete(self, now: float) -> list[m.Action]:
        self._advance(now)
        self._deactivate(now, drop_lease=False)
        self.phase = JobPhase.DELETED
        self._give_back = self.lease is not LeaseStage.FREE
        self._triggers.clear()
        return self._finish(now)

    def session_lost(self, now: float) -> list[m.Action]:
        """The session may be gone: the lease with it, and by `on_session_loss` the runs
        (another member may own the job already)."""
        self._lease_to(LeaseStage.FREE)
        self._give_back = False
        self.session = None
        for fire in list(self.fires.values()):
            if fire.stage is FireStage.LEASING:
                self._drop(fire, m.SkipReason.NOT_CONNECTED, "the session was lost")
            elif fire.stage in COMMAND_UP and self.tunables.on_session_loss == "terminate":
                self._out.append(m.Terminate(self.spec.name, fire.instant, "session lost"))
        return self._finish(now)

    def handle(self, event: m.JobEvent, now: float) -> list[m.Action]:
        self._advance(now)  # what came due before the event goes first
        match event:
            case m.Tick():
                pass
            case m.HistoryRead():
                self._history_read(event, now)
            case m.RangesRead():
                self._ranges_read(event, now)
            case m.LeaseAnswered():
                self._lease_answered(event, now)
            case m.LeaseGone():
                self._lease_gone()
            case m.ClaimAnswered():
                self._claim_answered(event, now)
            case m.Started():
                self._fire(event.instant).step(Step.STARTED)
            case m.StartFailed():
                fire = self._fire(event.instant)
                fire.step(Step.START_FAILED)
                self._write(fire, "error", error=event.error)
                self._after_run(now)
            case m.Exited():
                fire = self._fire(event.instant)
                fire.step(Step.EXITED)
                self._write(fire, event.status)
                self._after_run(now)
            case m.ResultWritten():
                fire = self._fire(event.instant)
                fire.step(Step.WRITTEN)
                del self.fires[fire.instant]
            case m.Triggered():
                if self.phase is not JobPhase.DELETED:
                    self._triggers.append(event.trigger_id)
        return self._finish(now)

    # -- queries --------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing held, nothing to do: the machine may be forgotten."""
        return (
            self.phase in (JobPhase.INACTIVE, JobPhase.DELETED)
            and not self.fires
            and self.lease is LeaseStage.FREE
            and not self._triggers
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

    # -- the core of it -------------------------------------------------------------------

    @property
    def _active(self) -> bool:
        return self.owned and self.session is not None and self.phase is not JobPhase.DELETED

    def _finish(self, now: float) -> list[m.Action]:
        if self._active and self.phase is JobPhase.INACTIVE:
            self._activate(now)
        elif not self._active and self.phase in (JobPhase.ACTIVE, JobPhase.PLANNING):
            self._deactivate(now, drop_lease=not self.owned)
        self._advance(now)
        if self._give_back and self.lease is LeaseStage.HELD and not self._lease_in_use():
            self._give_back = False
            self._lease_to(LeaseStage.FREE)
            self._out.append(m.GiveBackLease(self.spec.name))
        wake = self._wake(now)
        if wake != self.wake_at:
            self.wake_at = wake
            if wake != _NEVER:
                self._out.append(m.SetTimer(self.spec.name, wake))
        out, self._out = self._out, []
        return out

    def _activate(self, now: float) -> None:
        spec = self.spec
        # An instant is missed once its due time (instant + jitter) has passed: the plan
        # takes the instants surely due by now, the timer those that may not be yet.
        # Without a time of our own, everything after the job's newest record (and its last
        # change) is looked at: what the policy does not run is recorded, so no instant is
        # left without a record for the audit to call lost.
        since = self.last_active
        lower = self.updated_at if since is None else since - 1 - spec.jitter
        self._plan_lower = max(lower, self.updated_at)
        self._plan_until = now - spec.jitter
        self._set_next(_utc(self._plan_until))
        self._give_back = False
        self._holder = ("another member", False)  # nothing known of the lease's holder yet
        if spec.paused or _latest(spec, self._plan_lower, self._plan_until) is None:
            self.phase = JobPhase.ACTIVE
        else:
            self.phase = JobPhase.PLANNING
            self._plan_retry = _NEVER
            self._out.append(m.ReadHistory(spec.name))

    def _deactivate(self, now: float, drop_lease: bool) -> None:
        leasing = [f for f in self.fires.values() if f.stage is FireStage.LEASING]
        if self.phase in (JobPhase.ACTIVE, JobPhase.PLANNING):
            # the next catch-up here looks back to the oldest instant left without a record
            left = [f.instant for f in leasing] + [instant for instant, _ in self._queue]
            left += [self._gap] if self._gap is not None else []
            self._gap = None
            # a planning not done yet: the next one starts where this one would have
            floor = now
            if self.phase is JobPhase.PLANNING:
                floor = min(now, self._plan_lower + 1 + self.spec.jitter)
            self.last_active = min([floor] + [instant.timestamp() for instant in left])
        self.phase = JobPhase.INACTIVE
        self._queue.clear()
        self._waiting.clear()
        self._pending_plan = None
        reason = m.SkipReason.NOT_CONNECTED if self.session is None else None
        for fire in leasing:
            self._drop(fire, reason, "no longer active here")
        if not self.owned and self.session is not None:
            # moved: its new owner runs the triggers this member took and did not run
            while self._triggers:
                self._out.append(m.ReturnTrigger(self.spec.name, self._triggers.popleft()))
        if drop_lease and self.lease is not LeaseStage.FREE:
            self._give_back = True

    def _set_next(self, after: datetime) -> None:
        try:
            self._next = self.spec.schedule_obj.next_fire(after)
            self._next_due = self._due_of(self._next)
        except ScheduleError:
            self._next, self._next_due = None, _NEVER

    def _due_of(self, instant: datetime) -> float:
        return instant.timestamp() + jitter_of(fire_key(self.spec.name, instant), self.spec.jitter)

    def _deadline(self, instant: datetime, kind: m.FireKind, due: float) -> float:
        """When the fire must have been claimed (overlap = skip): its successor's due time
        for a scheduled instant, the job's next scheduled instant for the others."""
        if kind != "scheduled":
            return max(self._next_due, due)
        try:
            return max(self._due_of(self.spec.schedule_obj.next_fire(instant)), due)
        except ScheduleError:
            return _NEVER

    def _advance(self, now: float) -> None:
        if self._next is None and self.phase is not JobPhase.DELETED and self.owned:
            self._set_next(_utc(now))
        while self._next is not None and self._next_due <= now:
            instant, due = self._next, self._next_due
            self._set_next(instant)
            if self.phase is JobPhase.ACTIVE:
                self._due(instant, "scheduled", due, now)
            elif self.phase is JobPhase.PLANNING:
                self._waiting.append(instant)
            elif self.phase is JobPhase.INACTIVE and self.owned and self.session is None:
                self._skip(instant, m.SkipReason.NOT_CONNECTED, record=False)
        if self.phase is JobPhase.PLANNING and self._plan_retry <= now:
            self.phase = JobPhase.INACTIVE  # plan again, up to now
            self._waiting.clear()
            self._activate(now)
        for fire in list(self.fires.values()):
            if fire.retry_at <= now:
                self._retry(fire, now)
        if self.phase is JobPhase.ACTIVE:
            self._pump(now)
            self._take_ahead(now)

    def _due(
        self, instant: datetime, kind: m.FireKind, due: float, now: float, queued: bool = False
    ) -> None:
        """An instant of the job is due now (scheduled, a catch-up's, a trigger's); `queued`:
        its turn came in the catch-up queue."""
        spec = self.spec
        if instant in self.fires:
            return  # in hand already (a claim being settled, say): never two fires of one
        if spec.paused and kind != "trigger":
            self._skip(instant, m.SkipReason.PAUSED, record=False)
            return
        deadline = self._deadline(instant, kind, due)
        if spec.overlap == "allow":
            self._claim(Fire(instant, kind, FireStage.CLAIMING, deadline), now)
            return
        if not queued and kind == "scheduled" and self._queue:
            if spec.catchup == "all":
                # behind the catch-up, in order; run only if its successor is not due yet
                # when its turn comes (so a job slower than its period never falls behind)
                self._queue.append((instant, kind))
                return
            # latest: the catch-up's instant not started by now never will be (none is
            # claimed after a later one), and is recorded as such
            while self._queue:
                self._skip(self._queue.popleft()[0], m.SkipReason.STILL_RUNNING, record=True)
        if self.holding:
            self._skip(instant, m.SkipReason.STILL_RUNNING, record=True)
            return
        for old in [f for f in self.fires.values() if f.stage is FireStage.LEASING]:
            self._lease_not_free(old, "the job's lease did not come free")
        fire = Fire(instant, kind, FireStage.LEASING, deadline)
        self.fires[instant] = fire
        if self.lease is LeaseStage.HELD:
            fire.step(Step.LEASE_TAKEN)
            self._claim(fire, now)
        elif self.lease is LeaseStage.FREE:
            self._take_lease(fire.deadline - now)

    def _take_lease(self, wait: float) -> None:
        self._lease_to(LeaseStage.TAKING)
        wait = min(max(wait, 0.0), self.tunables.lease_wait_max)
        self._out.append(m.TakeLease(self.spec.name, wait))

    def _take_ahead(self, now: float) -> None:
        if self._ahead_wanted() and self._next_due - now <= self.tunables.lease_lead:
            self._ahead_for = self._next
            self._take_lease(0.0)

    def _claim(self, fire: Fire, now: float) -> None:
        self.fires[fire.instant] = fire
        if self._last_claimed is None or fire.instant > self._last_claimed:
            self._last_claimed = fire.instant
        # A trigger's instant is a fresh second between scheduled ones: never late.
        late = fire.kind == "catchup" or (
            fire.kind == "scheduled"
            and now - fire.instant.timestamp() >= self.tunables.late_claim_age
        )
        self._out.append(m.Claim(self.spec.name, fire.instant, fire.kind, late))

    def _pump(self, now: float) -> None:
        """Catch-up instants, then triggers, when the job is free for them."""
        window = self.spec.catchup_window
        while self._queue and (self.spec.overlap == "allow" or not self._busy()):
            instant, kind = self._queue.popleft()
            if instant.timestamp() < now - window:
                self._skip(instant, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, record=True)
            elif kind == "scheduled" and self._deadline(instant, kind, 0.0) <= now:
                self._skip(instant, m.SkipReason.STILL_RUNNING, record=True)
            else:
                self._due(instant, kind, instant.timestamp(), now, queued=True)
        if self._triggers and self._trigger_at <= now and not self._queue:
            if self.spec.overlap == "skip" and self._busy():
                return
            instant = trigger_instant(self.spec.schedule_obj, _utc(now))
            if instant in self.fires or (self._last_trigger and instant <= self._last_trigger):
                self._trigger_at = float(int(now) + 1)  # one trigger a second: its own instant
                return
            trigger = self._triggers.popleft()
            self._last_trigger = instant
            self._due(instant, "trigger", now, now)
            fire = self.fires.get(instant)
            if fire is not None:
                fire.trigger = trigger

    def _busy(self) -> bool:
        return self.holding or any(f.stage is FireStage.LEASING for f in self.fires.values())

    def _retry(self, fire: Fire, now: float) -> None:
        fire.retry_at = _NEVER
        if fire.stage is FireStage.LEASING:
            if self.lease is LeaseStage.FREE:
                self._take_lease(fire.deadline - now)
        elif fire.stage is FireStage.UNKNOWN:
            if now - fire.instant.timestamp() > max(
                self.spec.catchup_window, self.tunables.resolve_give_up
            ):
                self._out.append(
                    m.Warn(self.spec.name, "retry-abandoned", f"{self._key(fire)}: given up")
                )
                self._drop(fire, m.SkipReason.CLAIM_ERROR, "not settled in time")
            elif self.session is None:
                fire.retry_at = now + self.tunables.retry_interval
            else:
                fire.step(Step.RESOLVE_SENT)
                self._out.append(m.Resolve(self.spec.name, fire.instant))

    # -- answers ----------------------------------------------------------------------------

    def _lease_answered(self, event: m.LeaseAnswered, now: float) -> None:
        if self.lease is not LeaseStage.TAKING:
            # the session went while the take was on its way: whatever it got is not ours
            if event.outcome is m.LeaseOutcome.TAKEN:
                self._out.append(m.GiveBackLease(self.spec.name))
            return
        fire = next((f for f in self.fires.values() if f.stage is FireStage.LEASING), None)
        if event.outcome is m.LeaseOutcome.TAKEN:
            self._lease_to(LeaseStage.HELD)
            if self._gap is not None and self.phase is JobPhase.ACTIVE:
                self._catch_up_gap(now)
            elif fire is not None:
                fire.step(Step.LEASE_TAKEN)
                self._claim(fire, now)
            elif not self._active:
                self._give_back = True
            return
        self._lease_to(LeaseStage.FREE)
        if event.outcome is m.LeaseOutcome.BUSY:
            self._holder = (event.holder or "another member", event.running)
        if fire is None:
            return
        left = fire.deadline - now
        if left > self.tunables.retry_interval:
            # a take answered busy for an earlier fire's wait, or failed: time is left
            fire.retry_at = now + (
                0.0 if event.outcome is m.LeaseOutcome.BUSY else self.tunables.retry_interval
            )
        elif event.outcome is m.LeaseOutcome.BUSY:
            self._lease_not_free(fire, f"the job's lease is held by {self._holder[0]}")
        else:  # the take failed on the connection: the instant waits for a catch-up
            self._leave_for_catchup(fire, "the job's lease could not be taken")

    def _lease_not_free(self, fire: Fire, detail: str) -> None:
        """A fire's time for the lease is up. Held by a run: skipped `still-running`. Held
        between runs (the previous owner has not let go, or died and its session lives on):
        no run holds the job, so the instant is left to a catch-up, once the lease is ours."""
        holder, running = self._holder
        if running:
            self._drop(fire, m.SkipReason.STILL_RUNNING, detail)
        else:
            self._leave_for_catchup(fire, f"waiting for {holder} to let go of the job's lease")

    def _leave_for_catchup(self, fire: Fire, why: str) -> None:
        """No record for this instant now: it is planned again (by the catch-up policy) once
        the job's lease is ours, or on the next takeover."""
        fire.step(Step.DROPPED)
        del self.fires[fire.instant]
        if self._gap is None:
            self._out.append(
                m.Warn(self.spec.name, "lease-wait", f"{self._key(fire)}: {why}; caught up "
                       "once the lease is ours")
            )
        self._gap = fire.instant if self._gap is None else min(self._gap, fire.instant)
        if fire.trigger is not None:
            self._triggers.appendleft(fire.trigger)

    def _catch_up_gap(self, now: float) -> None:
        """The lease is ours after instants were left waiting for it: plan a catch-up from
        the first of them (the policy runs or records them, in order, then the rest)."""
        assert self._gap is not None
        for fire in [f for f in self.fires.values() if f.stage is FireStage.LEASING]:
            fire.step(Step.DROPPED)
            del self.fires[fire.instant]
            if fire.trigger is not None:
                self._triggers.appendleft(fire.trigger)
        self.last_active = self._gap.timestamp() + self.spec.jitter
        self._gap = None
        self.phase = JobPhase.INACTIVE
        self._queue.clear()
        self._activate(now)

    def _lease_gone(self) -> None:
        self._lease_to(LeaseStage.FREE)
        self._give_back = False
        if self.tunables.on_session_loss == "terminate":
            for fire in self.fires.values():
                if fire.stage in COMMAND_UP:
                    self._out.append(m.Terminate(self.spec.name, fire.instant, "lease vanished"))

    def _claim_answered(self, event: m.ClaimAnswered, now: float) -> None:
        fire = self._fire(event.instant)
        resolving = fire.stage is FireStage.RESOLVING
        if fire.stage not in (FireStage.CLAIMING, FireStage.RESOLVING):
            raise_illegal(f"a claim answer for a fire in {fire.stage.value}")
        match event.outcome:
            case m.ClaimOutcome.CREATED:
                fire.token = event.token
                refusal = self._refuse_start(fire, now, resolving)
                if refusal is None:
                    fire.step(Step.CREATED)
                    assert event.token is not None
                    self._out.append(m.Start(self.spec.name, fire.instant, fire.kind, event.token))
                else:
                    fire.step(Step.SETTLED)
                    self._skip(fire.instant, refusal[0], record=False, detail=refusal[1])
                    self._write(fire, "skipped", reason=refusal[0], error=refusal[1])
            case m.ClaimOutcome.TAKEN:
                holder = event.holder or "another member"
                # passed by a newer record: nothing is at its instant, so it is recorded
                record = event.passed and self.phase is JobPhase.ACTIVE
                self._drop(fire, m.SkipReason.ALREADY_CLAIMED, f"by {holder}", record)
            case m.ClaimOutcome.UNKNOWN:
                fire.step(Step.UNKNOWN)
                fire.retry_at = now + self.tunables.retry_interval
            case m.ClaimOutcome.ABSENT:
                if not resolving:
                    raise_illegal("ABSENT answers a resolve, not a claim")
                refusal = self._refuse_start(fire, now, True)
                # a trigger's instant is its own (never a scheduled one's): order is no matter
                later = fire.kind != "trigger" and (
                    self._last_claimed is not None and self._last_claimed > fire.instant
                )
                if refusal is None and not later and self.phase is JobPhase.ACTIVE:
                    fire.step(Step.CLAIM_SENT)
                    self._claim(fire, now)
                else:
                    record = self.phase is JobPhase.ACTIVE
                    self._drop(fire, m.SkipReason.CLAIM_ERROR, "its claim never landed", record)

    def _refuse_start(
        self, fire: Fire, now: float, late: bool
    ) -> tuple[m.SkipReason, str] | None:
        """Why a claim of ours must not start now; None: start it."""
        spec = self.spec
        if self.session is None:
            return m.SkipReason.NOT_CONNECTED, "not connected at the start"
        if self.phase is JobPhase.DELETED:
            return m.SkipReason.PAUSED, "the job was deleted"
        if spec.paused and fire.kind != "trigger":
            return m.SkipReason.PAUSED, "the job was paused"
        if spec.overlap == "skip":
            if self.lease is not LeaseStage.HELD:
                return m.SkipReason.CLAIM_ERROR, "the job's lease was lost before the start"
            if any(f is not fire and f.stage in COMMAND_UP for f in self.fires.values()):
                return m.SkipReason.STILL_RUNNING, "another run of the job is going"
            if late and fire.kind == "scheduled" and now > fire.deadline:
                return m.SkipReason.STILL_RUNNING, "settled after its successor was due"
        elif late and now - fire.instant.timestamp() > spec.catchup_window:
            return m.SkipReason.OUTSIDE_CATCHUP_WINDOW, "settled outside the catch-up window"
        return None

    def _after_run(self, now: float) -> None:
        """A command ended: the lease is free for the next fire at once; it goes back once
        the result is written unless the job stays ours and its next fire is near."""
        if self.lease is LeaseStage.HELD:
            near = self._next_due - now <= self.tunables.linger
            if not (self._active and near):
                self._give_back = True

    def _lease_in_use(self) -> bool:
        return any(
            f.stage in HOLDS_JOB or f.stage in (FireStage.WRITING, FireStage.LEASING)
            for f in self.fires.values()
        ) or (self._active and self.spec.overlap == "skip" and bool(self._queue))

    # -- planning the catch-up ------------------------------------------------------------

    def _history_read(self, event: m.HistoryRead, now: float) -> None:
        if self.phase is not JobPhase.PLANNING or self._pending_plan is not None:
            return  # an answer for a planning that was given up
        if not event.ok:
            self._plan_retry = now + self.tunables.retry_interval
            return
        spec, schedule = self.spec, self.spec.schedule_obj
        limit = _utc(now + self.tunables.future_margin)
        recorded = [i for i in event.instants if i <= limit]
        if len(recorded) < len(event.instants):
            future = format_utc(max(event.instants))
            self._out.append(
                m.Warn(spec.name, "future-record", f"records up to {future} are ignored")
            )
        lower, until = _utc(self._plan_lower), _utc(self._plan_until)
        newest = newest_scheduled(schedule, recorded)
        after = lower if newest is None else max(lower, newest)
        plan = plan_catchup(schedule, spec.catchup, spec.catchup_window, after, until)
        behind = holes(schedule, recorded, lower)
        behind = unpruned(behind, event.horizon, len(recorded), max(1, spec.history))
        self._pending_plan = _Plan(plan, behind, after)
        if behind:
            self._out.append(m.ReadRanges(spec.name, tuple(next_records(behind, recorded))))
        else:
            self._apply_plan(now)

    def _ranges_read(self, event: m.RangesRead, now: float) -> None:
        if self.phase is not JobPhase.PLANNING or self._pending_plan is None:
            return
        if not event.ok:  # planned again, from the history
            self._pending_plan = None
            self._plan_retry = now + self.tunables.retry_interval
            return
        found = outside_ranges(self._pending_plan.behind, list(event.ranges))
        self._pending_plan = _Plan(self._pending_plan.plan, found, self._pending_plan.after)
        self._apply_plan(now)

    def _apply_plan(self, now: float) -> None:
        assert self._pending_plan is not None
        plan, behind, after = (
            self._pending_plan.plan,
            self._pending_plan.behind,
            self._pending_plan.after,
        )
        self._pending_plan = None
        spec = self.spec
        # Holes (instants behind newer records that nothing covers) are recorded, never run:
        # running one now would claim it after a later instant of the job, out of order.
        for hole in behind:
            self._skip(hole, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, record=True)
        if plan.skipped and plan.first_skipped is not None:
            end = plan.run[0] - _MICRO if plan.run else _utc(self._plan_until)
            newest = spec.schedule_obj.latest_fire(after, end)
            if newest is not None:
                self._out.append(
                    m.Skip(spec.name, newest, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, "", plan.skipped)
                )
                self._out.append(
                    m.RecordSkip(
                        spec.name,
                        newest,
                        "catchup",
                        m.SkipReason.OUTSIDE_CATCHUP_WINDOW,
                        plan.first_skipped,
                        plan.skipped,
                    )
                )
        self._queue.extend((instant, "catchup") for instant in plan.run)
        self._queue.extend((instant, "scheduled") for instant in self._waiting)
        self._waiting.clear()
        self.phase = JobPhase.ACTIVE
        self._pump(now)

    # -- small helpers ----------------------------------------------------------------------

    def _fire(self, instant: datetime) -> Fire:
        fire = self.fires.get(instant)
        if fire is None:
            raise_illegal(f"no fire of {self.spec.name} at {format_utc(instant)}")
        return fire

    def _key(self, fire: Fire) -> str:
        return fire_key(self.spec.name, fire.instant)

    def _write(
        self,
        fire: Fire,
        status: str,
        reason: m.SkipReason | None = None,
        error: str | None = None,
    ) -> None:
        self._out.append(m.WriteResult(self.spec.name, fire.instant, status, reason, error))

    def _drop(
        self, fire: Fire, reason: m.SkipReason | None, detail: str, record: bool | None = None
    ) -> None:
        """Forget a fire that left nothing of ours behind, and say why it did not run. A
        trigger's goes back to wait for its turn (it runs once), unless its instant is
        another fire's."""
        fire.step(Step.DROPPED)
        del self.fires[fire.instant]
        if fire.trigger is not None and reason is not m.SkipReason.ALREADY_CLAIMED:
            self._triggers.appendleft(fire.trigger)
            return
        if reason is not None:
            keep = reason is m.SkipReason.STILL_RUNNING if record is None else record
            keep = keep and self.session is not None
            self._skip(fire.instant, reason, record=keep, detail=detail)

    def _skip(
        self, instant: datetime, reason: m.SkipReason, record: bool, detail: str = ""
    ) -> None:
        self._out.append(m.Skip(self.spec.name, instant, reason, detail))
        if record:
            self._out.append(m.RecordSkip(self.spec.name, instant, "scheduled", reason))

    def _lease_to(self, stage: LeaseStage) -> None:
        self.lease = check_lease_move(self.lease, stage)

    def _wake(self, now: float) -> float:
        """The next moment something is due. Whatever was due by `now` has been done; what
        is still pending then waits for an event, not for time."""
        times = [f.retry_at for f in self.fires.values()]
        if self.phase is JobPhase.PLANNING:
            times.append(self._plan_retry)
        if self._triggers and self.phase is JobPhase.ACTIVE:
            times.append(self._trigger_at)
        if self._next is not None and (self.owned or self.phase is JobPhase.ACTIVE):
            times.append(self._next_due)
            if self._ahead_wanted():
                times.append(self._next_due - self.tunables.lease_lead)
        return min((t for t in times if t > now), default=_NEVER)

    def _ahead_wanted(self) -> bool:
        """Whether the lease is to be taken ahead of the next instant (when it comes near)."""
        return (
            self.phase is JobPhase.ACTIVE
            and self.spec.overlap == "skip"
            and not self.spec.paused
            and self.lease is LeaseStage.FREE
            and self._next is not None
            and self._ahead_for != self._next
        )


def raise_illegal(text: str) -> NoReturn:
    raise IllegalTransition(text)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _latest(spec: JobSpec, lower: float, now: float) -> datetime | None:
    if lower >= now:
        return None
    return spec.schedule_obj.latest_fire(_utc(lower), _utc(now))
