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
  `still-running` and recorded, never queued (but behind a catch-up under `catchup = "all"`,
  in order). A scheduled instant whose successor is due before it could claim is skipped,
  not run late, unless it only waited for such a catch-up and the job runs shorter than its
  period: then it runs as part of the catch-up, so a slow job never falls behind.
- A job's instants are claimed in instant order: none is (re)claimed after a later one.
- A claim sent before this member lost contact never starts: once connected, its record is
  withdrawn (deleted while still exactly our claim), and the catch-up planned after that
  runs or records the instant by the job's policy (`PARKED`, `WITHDRAWING`).
"""

from __future__ import annotations

from datetime import datetime

from zksched.core.fire import model as m
from zksched.core.fire.answers import AnswerHandling
from zksched.core.fire.planning import CatchupPlanning
from zksched.core.fire.retrying import Retrying
from zksched.core.fire.stages import BEFORE_START, COMMAND_UP, FireStage, JobPhase, LeaseStage, Step
from zksched.core.fire.state import NEVER, FireInProgress, _utc, due_of
from zksched.core.jobspec import JobSpec
from zksched.core.schedule import ScheduleError
from zksched.core.schedule.catchup import trigger_instant

__all__ = ["FireInProgress", "JobFireMachine", "JobPhase"]


class JobFireMachine(CatchupPlanning, AnswerHandling, Retrying):
    __slots__ = ()

    def set_owned(self, owned: bool, now: float) -> list[m.Action]:
        self.owned = owned
        if not owned and self.lease is not LeaseStage.FREE:
            self._give_back = True
        return self._finish(now)

    def rest_until(self, now: float, horizon: float) -> float | None:
        """When a machine dropped now would have to be made again (its next instant's due
        time less `horizon`), or None: it holds something a new machine would not know
        (a fire, a lease, a queue, triggers, a recent trigger's instant, the length of a
        catch-up-all job's last run), or is due soon. A machine made again from
        `last_active = resting_since()` plans nothing and takes up the very next instant."""
        if (
            horizon <= 0
            or not self.owned
            or self.phase is not JobPhase.ACTIVE
            or self.session is None
            or self.spec.jitter  # the next instant's neighbours are then not known apart
            or self._at_least_once
            or self.fires
            or self.lease is not LeaseStage.FREE
            or self._give_back
            or self._queue
            or self._triggers
            or self._withdrawals
            or self._unrecorded
            or (self.spec.catchup == "all" and self._last_run != NEVER)
            or (self._last_trigger is not None and self._last_trigger.timestamp() > now - 2)
            or self._next is None
        ):
            return None
        wake = self._next_due - horizon
        return wake if wake > now else None

    def resting_since(self) -> float:
        """The `last_active` of a machine made again for a resting one: every instant before
        the next was handled (and instants are whole seconds), so its catch-up looks at
        none of them."""
        assert self._next is not None
        return self._next.timestamp()

    def set_session(self, session: int | None, now: float) -> list[m.Action]:
        self._set_session(session)
        if session is not None:
            for fire in self.fires.values():
                if fire.stage in (FireStage.UNKNOWN, FireStage.PARKED) and fire.retry_at == NEVER:
                    fire.retry_at = now  # it was waiting for the connection
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
        self._enter(JobPhase.DELETED)
        self._give_back = self.lease is not LeaseStage.FREE
        self._triggers_ = None
        return self._finish(now)

    def session_lost(self, now: float) -> list[m.Action]:
        """The session may be gone: the lease with it, and by `on_session_loss` the runs
        (another member may own the job already)."""
        self._lease_to(LeaseStage.FREE)
        self._give_back = False
        self._set_session(None)
        for fire in self.fires.values():
            # at-least-once: its claim may be run again once the session is gone: never beside
            if fire.stage in COMMAND_UP and (
                self.tunables.on_session_loss == "terminate" or self._at_least_once
            ):
                self._emit(m.Terminate(self.spec.name, fire.instant, "session lost"))
        return self._finish(now)  # deactivates: fires waiting for the lease are dropped

    def handle(self, event: m.JobEvent, now: float) -> list[m.Action]:
        self._advance(now)  # what came due before the event goes first
        match event:
            case m.Tick():
                pass
            case m.HistoryRead():
                self._history_read(event, now)
            case m.RangesRead():
                self._ranges_read(event, now)
            case m.OrphansFound():
                self._orphans_found(event, now)
            case m.LeaseAnswered():
                self._lease_answered(event, now)
            case m.LeaseGone():
                self._lease_gone(event)
            case m.ClaimAnswered():
                self._claim_answered(event, now)
            case m.Withdrawn():
                self._withdrawn(event, now)
            case m.Started():
                fire = self._fire(event.instant)
                fire.step(Step.STARTED)
                fire.started_at = now
            case m.StartFailed():
                fire = self._fire(event.instant)
                fire.step(Step.START_FAILED)
                self._write(fire, "error", error=event.error)
                self._after_run(now)
            case m.Exited():
                fire = self._fire(event.instant)
                self._last_run = now - fire.started_at if fire.started_at != NEVER else NEVER
                if not self._retry_later(fire, event.status, now):
                    fire.step(Step.EXITED)
                    self._write(fire, event.status)
                self._after_run(now)
            case m.ResultWritten():
                fire = self._fire(event.instant)
                fire.step(Step.WRITTEN)
                del self.fires[fire.instant]
            case m.Triggered():
                if self.phase is not JobPhase.DELETED:
                    self._triggers_list().append(event.trigger_id)
        return self._finish(now)

    def _finish(self, now: float) -> list[m.Action]:
        if self._active and self.phase is JobPhase.INACTIVE:
            self._activate(now)
        elif not self._active and self.phase in (JobPhase.ACTIVE, JobPhase.PLANNING):
            self._deactivate(now, drop_lease=not self.owned)
        self._advance(now)
        if self._withdrawals and not self._active:
            # the job left us (or went before the withdrawal was answered): a changed job
            # stays active, and its re-plan sees them
            self._record_withdrawn()
        if self._unrecorded and not self.holding and not self._outcome_pending:
            self._record_still_running()  # the claim that held the job settled
        if self._triggers and self.phase is JobPhase.DELETED:
            self._triggers_ = None
        elif self._triggers and not self.owned and self.session is not None:
            # moved: its new owner runs the triggers this member took and did not run
            while self._triggers:
                self._emit(m.ReturnTrigger(self.spec.name, self._triggers_list().pop(0)))
        if self._give_back and self.lease is LeaseStage.HELD and not self._lease_in_use():
            self._give_back = False
            self._lease_to(LeaseStage.FREE)
            self._emit(m.GiveBackLease(self.spec.name, self._take))
        wake = self._wake(now)
        if wake != self.wake_at:
            self.wake_at = wake
            if wake != NEVER:
                self._emit(m.SetTimer(self.spec.name, wake))
        out, self._out = self._out, None
        return out if out is not None else []

    def _deactivate(self, now: float, drop_lease: bool) -> None:
        self._give_up_retries("the job is no longer active here")
        leasing = [f for f in self.fires.values() if f.stage is FireStage.LEASING]
        if self.phase in (JobPhase.ACTIVE, JobPhase.PLANNING):
            # the next catch-up here looks back to the oldest instant that may be left
            # without a record (a claim in flight may yet be withdrawn)
            left = [f.instant for f in self.fires.values() if f.stage in BEFORE_START]
            left += [instant for instant, _ in self._queue]
            left += self._unrecorded
            self._unrecorded_ = None
            left += [self._gap] if self._gap is not None else []
            self._gap = None
            # a planning not done yet: the next one starts where this one would have
            floor = now
            if self.phase is JobPhase.PLANNING:
                floor = min(now, self._plan_lower + 1 + self.spec.jitter)
            self.last_active = min([floor] + [instant.timestamp() for instant in left])
        self._enter(JobPhase.INACTIVE)
        self._queue_ = None
        self._reruns_ = None  # found again by the next planning, here or at the next owner
        self._orphans_due = NEVER
        self._waiting_ = None
        self._pending_plan = None
        self._plan_waits = False
        reason = m.SkipReason.NOT_CONNECTED if self.session is None else None
        for fire in leasing:
            self._drop(fire, reason, "no longer active here")
        if drop_lease and self.lease is not LeaseStage.FREE:
            self._give_back = True

    def _set_next(self, after: datetime) -> None:
        try:
            self._next = self.spec.schedule_obj.next_fire(after)
            self._next_due = self._due_of(self._next)
        except ScheduleError:
            self._next, self._next_due = None, NEVER

    def _due_of(self, instant: datetime) -> float:
        return due_of(self.spec, instant)

    def _deadline(self, instant: datetime, kind: m.FireKind, due: float) -> float:
        """When the fire must have been claimed (overlap = skip): its successor's due time
        for a scheduled instant, the job's next scheduled instant for the others."""
        if kind != "scheduled":
            return max(self._next_due, due)
        try:
            return max(self._due_of(self.spec.schedule_obj.next_fire(instant)), due)
        except ScheduleError:
            return NEVER

    def _advance(self, now: float) -> None:
        # a planning given up (a failed read) or held (interrupted claims) starts again
        # first, so that what comes due by now is fired or waits for it in this same call
        if self.phase is JobPhase.PLANNING and self._plan_waits and not self._unsettled():
            self._plan_waits = False  # every interrupted claim has settled: plan now
            self._plan_retry = now
        if self.phase is JobPhase.PLANNING and self._plan_retry <= now:
            self._enter(JobPhase.INACTIVE)  # plan again, up to now
            self._pending_plan = None  # (its ranges were never answered)
            self._waiting_ = None
            self._activate(now)
        if self._next is None and self.phase is not JobPhase.DELETED and self.owned:
            self._set_next(_utc(now))
        while self._next is not None and self._next_due <= now:
            instant, due = self._next, self._next_due
            self._set_next(instant)
            if self.phase is JobPhase.ACTIVE:
                self._due(instant, "scheduled", due, now)
            elif self.phase is JobPhase.PLANNING:
                self._waiting_list().append(instant)
            elif self.phase is JobPhase.INACTIVE and self.owned and self.session is None:
                self._skip(instant, m.SkipReason.NOT_CONNECTED, record=False)
        for fire in list(self.fires.values()):
            if fire.retry_at <= now:
                self._retry(fire, now)
        if self.phase is JobPhase.ACTIVE:
            self._pump(now)
            self._take_ahead(now)
            self._look_for_orphans(now)

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
        if (
            kind == "scheduled"
            and spec.overlap == "skip"
            and due < self._active_since
            and self._deadline(instant, kind, 0.0) <= now
        ):
            # missed before the job was active here (after the catch-up plan's bound: a
            # jitter longer than the period), and its successor is due: the policy decides
            # it as the plan would have, never a scheduled start after its successor's due
            if spec.catchup != "all":
                self._skip(instant, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, record=True)
                return
            kind = "catchup"
        deadline = self._deadline(instant, kind, due)
        if spec.overlap == "allow":
            self._claim(FireInProgress(instant, kind, FireStage.CLAIMING, deadline), now)
            return
        if not queued and kind == "scheduled" and (self._queue or self._catching_up()):
            if spec.catchup == "all":
                # behind the catch-up (its last instant may be running still), in order;
                # see _pump for when it runs late
                self._queue_list().append((instant, kind))
                return
            # latest: the catch-up's instant not started by now never will be (none is
            # claimed after a later one), and is recorded as such; an orphan to run again
            # (at-least-once) waits for its turn whatever comes due meanwhile
            for missed, _ in [e for e in self._queue if e[0] not in self._reruns]:
                self._skip(missed, m.SkipReason.STILL_RUNNING, record=True)
            self._queue_ = [e for e in self._queue if e[0] in self._reruns] or None
        if self.holding:
            # recorded once the claim that holds the job starts its run; if that claim comes
            # to nothing (contact lost, withdrawn), nothing ran: the instant is caught up
            running = any(f.stage in COMMAND_UP for f in self.fires.values())
            self._skip(instant, m.SkipReason.STILL_RUNNING, record=running)
            if not running:
                self._unrecorded_list().append(instant)
            return
        for old in [f for f in self.fires.values() if f.stage is FireStage.LEASING]:
            self._lease_not_free(old, "the job's lease did not come free")
        fire = FireInProgress(instant, kind, FireStage.LEASING, deadline)
        self.fires[instant] = fire
        if self.lease is LeaseStage.HELD:
            fire.step(Step.LEASE_TAKEN)
            self._claim(fire, now)
        elif self.lease is LeaseStage.FREE:
            self._take_lease(fire.deadline - now)

    def _take_ahead(self, now: float) -> None:
        if self._ahead_wanted() and self._next_due - now <= self.tunables.lease_lead:
            self._ahead_for = self._next
            self._take_lease(0.0)

    def _claim(self, fire: FireInProgress, now: float) -> None:
        fire.epoch = self.epoch
        if self._withdrawals_:  # it gets a record: ours, or whoever's won
            self._withdrawals_.pop(fire.instant, None)
        self.fires[fire.instant] = fire
        if fire.kind == "catchup" and now - fire.instant.timestamp() > self.spec.catchup_window:
            # its window passed while it waited (for the job's lease): recorded, not run
            detail = "its catch-up window passed while it waited"
            self._drop(fire, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, detail, record=True)
            return
        # A trigger's instant is a fresh second between scheduled ones: never late.
        late = fire.kind == "catchup" or (
            fire.kind == "scheduled"
            and now - fire.instant.timestamp() >= self.tunables.late_claim_age
        )
        if self._reruns_:
            fire.attempt = self._reruns_.pop(fire.instant, fire.attempt)
        self._emit(m.Claim(self.spec.name, fire.instant, fire.kind, late, fire.attempt))

    def _pump(self, now: float) -> None:
        """Triggers (an operator's "now": never behind a long catch-up), then catch-up
        instants, when the job is free for them."""
        self._pump_trigger(now)
        window = self.spec.catchup_window
        while self._queue and (self.spec.overlap == "allow" or not self._busy()):
            instant, kind = self._queue_list().pop(0)
            if instant.timestamp() < now - window:
                self._skip(instant, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, record=True)
            elif kind == "scheduled" and self._deadline(instant, kind, 0.0) <= now:
                if self._keeps_up(instant):
                    # late only because the catch-up ran first: part of the catch-up
                    self._due(instant, "catchup", instant.timestamp(), now, queued=True)
                else:
                    self._skip(instant, m.SkipReason.STILL_RUNNING, record=True)
            else:
                self._due(instant, kind, instant.timestamp(), now, queued=True)

    def _keeps_up(self, instant: datetime) -> bool:
        """Whether the job's last run here took less than the period after `instant`: such a
        job catches up a backlog in finite time, so its instants queued behind a catch-up
        (`catchup = "all"`) run late rather than being skipped. A job slower than its period
        (or not run here yet) never builds a backlog: its late instant is skipped."""
        if self.spec.catchup != "all" or self._last_run == NEVER:
            return False
        try:
            following = self.spec.schedule_obj.next_fire(instant)
        except ScheduleError:
            return False
        return self._last_run < (following - instant).total_seconds()

    def _pump_trigger(self, now: float) -> None:
        if not self._triggers or self._trigger_at > now:
            return
        if self.spec.overlap == "skip" and self._busy():
            return
        instant = trigger_instant(self.spec.schedule_obj, _utc(now))
        if instant in self.fires or (self._last_trigger and instant <= self._last_trigger):
            self._trigger_at = float(int(now) + 1)  # one trigger a second: its own instant
            return
        trigger = self._triggers_list().pop(0)
        self._last_trigger = instant
        self._due(instant, "trigger", now, now)
        fire = self.fires.get(instant)
        if fire is not None:
            fire.trigger = trigger

    def _wake(self, now: float) -> float:
        """The next moment something is due. Whatever was due by `now` has been done; what
        is still pending then waits for an event, not for time."""
        times = [f.retry_at for f in self.fires.values()]
        if self.phase is JobPhase.PLANNING:
            times.append(self._plan_retry)
        if self._triggers and self.phase is JobPhase.ACTIVE:
            times.append(self._trigger_at)
        if self.phase is JobPhase.ACTIVE:
            times.append(self._orphans_due)
        if self._next is not None and (self.owned or self.phase is JobPhase.ACTIVE):
            times.append(self._next_due)
            if self._ahead_wanted():
                times.append(self._next_due - self.tunables.lease_lead)
        return min((t for t in times if t > now), default=NEVER)

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
