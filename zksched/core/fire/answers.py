"""What a job's machine does with ZooKeeper's answers: leases and claims."""

from __future__ import annotations

from datetime import datetime

from zksched.core.fire import model as m
from zksched.core.fire.stages import COMMAND_UP, FireStage, JobPhase, LeaseStage, Step
from zksched.core.fire.state import NEVER, FireInProgress, JobState, due_of, raise_illegal


class AnswerHandling(JobState):
    __slots__ = ()

    def _take_lease(self, wait: float) -> None:
        self._lease_to(LeaseStage.TAKING)
        wait = min(max(wait, 0.0), self.tunables.lease_wait_max)
        self._take = next(self._takes)
        self._emit(m.TakeLease(self.spec.name, wait, self._take))

    def _retry(self, fire: FireInProgress, now: float) -> None:
        fire.retry_at = NEVER
        if fire.stage is FireStage.LEASING:
            if self.lease is LeaseStage.FREE:
                self._take_lease(fire.deadline - now)
        elif fire.stage is FireStage.UNKNOWN:
            # never given up: a claim that landed would stay `running` under a live member;
            # once resolved, one too late to start is recorded (`_refuse_start`)
            if self.session is not None:
                fire.step(Step.RESOLVE_SENT)
                self._emit(m.Resolve(self.spec.name, fire.instant))
        elif fire.stage is FireStage.PARKED:
            self._unpark(fire)
        elif fire.stage is FireStage.BACKING_OFF:
            self._attempt_again(fire, now)

    def _lease_answered(self, event: m.LeaseAnswered, now: float) -> None:
        if self.lease is not LeaseStage.TAKING or event.take != self._take:
            # a take given up (the session went while it was on its way) answers late:
            # whatever it got is not ours, and only its own node goes back
            if event.outcome is m.LeaseOutcome.TAKEN:
                self._emit(m.GiveBackLease(self.spec.name, event.take))
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

    def _lease_not_free(self, fire: FireInProgress, detail: str) -> None:
        """A fire's time for the lease is up. Held by a run: skipped `still-running`. Held
        between runs (the previous owner has not let go, or died and its session lives on):
        no run holds the job, so the instant is left to a catch-up, once the lease is ours."""
        holder, running = self._holder
        if running:
            self._drop(fire, m.SkipReason.STILL_RUNNING, detail)
        else:
            self._leave_for_catchup(fire, f"waiting for {holder} to let go of the job's lease")

    def _leave_for_catchup(self, fire: FireInProgress, why: str) -> None:
        """No record for this instant now: it is planned again (by the catch-up policy) once
        the job's lease is ours, or on the next takeover."""
        fire.step(Step.DROPPED)
        del self.fires[fire.instant]
        if self._gap is None:
            self._emit(
                m.Warn(
                    self.spec.name,
                    "lease-wait",
                    f"{self._key(fire)}: {why}; caught up once the lease is ours",
                )
            )
        self._gap = fire.instant if self._gap is None else min(self._gap, fire.instant)
        self._trigger_again(fire)

    def _lease_gone(self, event: m.LeaseGone) -> None:
        if self.lease is not LeaseStage.HELD or event.take != self._take:
            return  # a lock given back or given up already
        self._lease_to(LeaseStage.FREE)
        self._give_back = False
        self._emit(m.GiveBackLease(self.spec.name, event.take))  # the shell forgets it
        if self.spec.overlap == "skip":
            self._give_up_retries("the job's lease vanished")
        if self.tunables.on_session_loss == "terminate":
            for fire in self.fires.values():
                if fire.stage in COMMAND_UP:
                    self._emit(m.Terminate(self.spec.name, fire.instant, "lease vanished"))

    def _claim_answered(self, event: m.ClaimAnswered, now: float) -> None:
        fire = self._fire(event.instant)
        resolving = fire.stage is FireStage.RESOLVING
        if fire.stage not in (FireStage.CLAIMING, FireStage.RESOLVING):
            raise_illegal(f"a claim answer for a fire in {fire.stage.value}")
        match event.outcome:
            case m.ClaimOutcome.CREATED if self._interrupted(fire):
                fire.token = event.token
                fire.step(Step.PARKED)
                self._unpark(fire)
            case m.ClaimOutcome.CREATED:
                fire.token = event.token
                refusal = self._refuse_start(fire, now, resolving)
                if refusal is None:
                    fire.step(Step.CREATED)
                    assert event.token is not None
                    self._emit(
                        m.Start(self.spec.name, fire.instant, fire.kind, event.token, fire.attempt)
                    )
                    self._record_still_running()  # this run held the job meanwhile
                else:
                    fire.step(Step.SETTLED)
                    self._skip(fire.instant, refusal[0], record=False, detail=refusal[1])
                    self._write(fire, "skipped", reason=refusal[0], error=refusal[1])
                    self._trigger_again(fire)
            case m.ClaimOutcome.TAKEN:
                holder = event.holder or "another member"
                # passed by a newer record: nothing is at its instant, so it is recorded
                record = event.passed and self.phase is JobPhase.ACTIVE
                self._drop(fire, m.SkipReason.ALREADY_CLAIMED, f"by {holder}", record)
                self._due_again(now)
            case m.ClaimOutcome.UNKNOWN:
                fire.step(Step.UNKNOWN)
                fire.retry_at = now + self.tunables.retry_interval
            case m.ClaimOutcome.ABSENT if not resolving:
                raise_illegal("ABSENT answers a resolve, not a claim")
            case m.ClaimOutcome.ABSENT if self._interrupted(fire):
                # never claimed: the instant is missed, and the next catch-up plans it
                self._drop(fire, None, "")
            case m.ClaimOutcome.ABSENT:
                refusal = self._refuse_start(fire, now, True)
                if refusal is None and self.phase is JobPhase.ACTIVE:
                    fire.step(Step.CLAIM_SENT)
                    self._claim(fire, now)
                else:
                    record = self.phase is JobPhase.ACTIVE
                    self._drop(fire, m.SkipReason.CLAIM_ERROR, "its claim never landed", record)

    def _due_again(self, now: float) -> None:
        """The instants skipped while a claim of ours held the job, that claim being another
        member's instant: nothing ran over them (the lease is ours, and that member's run
        ended before it let the lease go). Each is due again while its successor is not,
        else recorded `still-running` (a handover's late claim must not cost the next)."""
        if self.holding or self._outcome_pending or self.phase is not JobPhase.ACTIVE:
            return
        stale: list[datetime] = []
        fresh: list[tuple[datetime, float]] = []
        for instant in self._unrecorded:
            due = due_of(self.spec, instant)
            if self._deadline(instant, "scheduled", due) > now:
                fresh.append((instant, due))
            else:
                stale.append(instant)
        self._unrecorded_ = stale or None
        self._record_still_running()
        for instant, due in fresh:
            self._due(instant, "scheduled", due, now)

    def _refuse_start(
        self, fire: FireInProgress, now: float, late: bool
    ) -> tuple[m.SkipReason, str] | None:
        """Why a claim of ours, made in this connection, must not start now; None: start."""
        spec = self.spec
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
        outside = now - fire.instant.timestamp() > spec.catchup_window
        if late and outside and (fire.kind == "catchup" or spec.overlap == "allow"):
            return m.SkipReason.OUTSIDE_CATCHUP_WINDOW, "settled outside the catch-up window"
        return None

    def _unpark(self, fire: FireInProgress) -> None:
        """A claim of ours sent before this member lost contact: once connected, withdrawn
        if the job is still ours to catch up (the catch-up planning waits for it), else
        completed as a skip (the job moved, was paused or deleted): never started."""
        fire.retry_at = NEVER
        if self.session is None:
            return  # `set_session` wakes it
        why = None
        if self.phase is JobPhase.DELETED:
            why = m.SkipReason.PAUSED, "the job was deleted"
        elif self.spec.paused and fire.kind != "trigger":
            why = m.SkipReason.PAUSED, "the job was paused"
        elif not self.owned:
            why = m.SkipReason.NOT_CONNECTED, "contact was lost before the start; the job moved"
        if why is None:
            fire.step(Step.WITHDRAW_SENT)
            self._emit(m.Withdraw(self.spec.name, fire.instant))
            return
        fire.step(Step.SETTLED)
        self._skip(fire.instant, why[0], record=False, detail=why[1])
        self._write(fire, "skipped", reason=why[0], error=why[1])
        self._trigger_again(fire)

    def _withdrawn(self, event: m.Withdrawn, now: float) -> None:
        fire = self._fire(event.instant)
        if event.done:
            fire.step(Step.WITHDRAWN)
            del self.fires[fire.instant]
            self._withdrawals_dict()[fire.instant] = None
            self._trigger_again(fire)
            return
        fire.step(Step.UNKNOWN)
        fire.retry_at = now + self.tunables.retry_interval if self.session is not None else NEVER

    def _record_withdrawn(self) -> None:
        """Record (skipped, not-connected) the withdrawn instants no catch-up of ours has
        claimed or recorded, once we can: the job is leaving us, and its next owner may have
        read the withdrawn claim as the instant's record (a record made since wins)."""
        if self.phase is JobPhase.DELETED:
            self._withdrawals_ = None  # nothing of a deleted job is recorded
        if self.session is None:
            return  # once connected again
        for instant in sorted(self._withdrawals):
            self._skip(
                instant,
                m.SkipReason.NOT_CONNECTED,
                record=True,
                detail="its claim was withdrawn and the job moved before its catch-up",
            )
        self._withdrawals_ = None

    def _after_run(self, now: float) -> None:
        """A command ended: the lease is free for the next fire at once; it goes back once
        the result is written unless the job stays ours and its next fire is near."""
        if self.lease is LeaseStage.HELD:
            near = self._next_due - now <= self.tunables.linger
            if not (self._active and near):
                self._give_back = True
