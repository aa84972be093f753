"""What a job's machine does when a run fails and the job asks for retries (`retries = N`).

A failed or timed-out run is run again on this member under the same claim (same fire
key, same fencing token, the attempt number counting up), after a pause that doubles each
time (core/retries.py). The fire holds the job meanwhile (`BACKING_OFF` is in `HOLDS_JOB`):
with overlap = skip no other instant starts, and the lease stays ours.

Invariants:
- A retry starts only while the job is active here (ours, connected, not deleted or
  paused) and, with overlap = skip, under the job's lease and before the instant's
  successor is due (the job's next instant, for a catch-up's or a trigger's); a caught-up
  instant's, only within the catch-up window. Otherwise the fire gives up: its last
  attempt's result is its result.
- A run that ended ok, was terminated or could not start is never retried.
"""

from __future__ import annotations

from zksched.core.fire import model as m
from zksched.core.fire.stages import COMMAND_UP, FireStage, JobPhase, LeaseStage, Step
from zksched.core.fire.state import NEVER, FireInProgress, JobState
from zksched.core.retries import RETRYABLE, retry_delay


class Retrying(JobState):
    __slots__ = ()

    def _retry_later(self, fire: FireInProgress, status: str, now: float) -> bool:
        """After a run of `fire` ended `status`: whether it is run again (then it backs off
        until its retry time, and its record notes the attempt)."""
        spec = self.spec
        if status not in RETRYABLE or fire.attempt > spec.retries:
            return False
        at = now + retry_delay(spec.retry_backoff, fire.attempt, self._key(fire))
        # overlap = skip: never after the instant's successor is due (for a catch-up's or a
        # trigger's instant: the job's next instant), so a retry never makes a backlog
        fire.retry_by = self._deadline(fire.instant, fire.kind, 0.0)
        why = self._no_retry(fire, at)
        if why is not None:
            self._emit(m.Warn(spec.name, "retry-given-up", f"{self._key(fire)}: no retry: {why}"))
            return False
        fire.step(Step.RETRY_LATER)
        fire.retry_at, fire.last_status = at, status
        self._emit(m.RecordAttempt(spec.name, fire.instant, fire.attempt, status, at))
        return True

    def _attempt_again(self, fire: FireInProgress, now: float) -> None:
        """A backing-off fire's retry time came."""
        why = self._no_retry(fire, now)
        if why is not None:
            self._give_up(fire, why)
            return
        assert fire.token is not None
        fire.attempt += 1
        fire.step(Step.RETRIED)
        self._emit(m.Start(self.spec.name, fire.instant, fire.kind, fire.token, fire.attempt))

    def _give_up_retries(self, why: str) -> None:
        for fire in [f for f in self.fires.values() if f.stage is FireStage.BACKING_OFF]:
            self._give_up(fire, why)

    def _no_retry(self, fire: FireInProgress, at: float) -> str | None:
        """Why `fire` may not start again at `at`; None: it may."""
        spec = self.spec
        if not self._active or self.phase is not JobPhase.ACTIVE:
            return "the job is no longer active here"
        if spec.paused and fire.kind != "trigger":
            return "the job was paused"
        if fire.kind == "catchup" and at - fire.instant.timestamp() > spec.catchup_window:
            return "it would start outside the catch-up window"
        if spec.overlap == "skip":
            if self.lease is not LeaseStage.HELD:
                return "the job's lease is gone"
            if any(f is not fire and f.stage in COMMAND_UP for f in self.fires.values()):
                return "another run of the job is going"
            if at >= fire.retry_by:
                return "it would start after the job's next instant (overlap = skip)"
        return None

    def _give_up(self, fire: FireInProgress, why: str) -> None:
        key = self._key(fire)
        self._emit(m.Warn(self.spec.name, "retry-given-up", f"{key}: no retry: {why}"))
        fire.retry_at = NEVER
        fire.step(Step.GAVE_UP)
        self._write(fire, fire.last_status)
