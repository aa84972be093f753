"""Planning a job's catch-up when it becomes ours: from its fire records, by its policy."""

from __future__ import annotations

from datetime import timedelta

from zksched.core.fire import model as m
from zksched.core.fire.redelivery import Redelivering
from zksched.core.fire.stages import FireStage, JobPhase, Step
from zksched.core.fire.state import NEVER, _latest, _Plan, _utc, plan_lower
from zksched.core.firekey import format_utc
from zksched.core.schedule.catchup import (
    holes,
    newest_scheduled,
    next_records,
    outside_ranges,
    plan_catchup,
    unpruned,
)

_MICRO = timedelta(microseconds=1)


class CatchupPlanning(Redelivering):
    __slots__ = ()

    def _activate(self, now: float) -> None:
        spec = self.spec
        # An instant is missed once its due time (instant + jitter) has passed: the plan
        # takes the instants surely due by now, the timer those that may not be yet.
        # Without a time of our own, everything after the job's newest record (and its last
        # change) is looked at: what the policy does not run is recorded, so no instant is
        # left without a record for the audit to call lost.
        since = self.last_active
        self._plan_lower = plan_lower(spec, self.updated_at, since)
        self._plan_until = now - spec.jitter
        self._active_since = now
        self._set_next(_utc(self._plan_until))
        self._give_back = False
        self._holder = ("another member", False)  # nothing known of the lease's holder yet
        if self._unsettled():
            # a claim from before the lost contact may yet be withdrawn: its instant would
            # then be missed, so the history is read once every such claim has settled
            self._enter(JobPhase.PLANNING)
            self._plan_retry = NEVER
            self._plan_waits = True
        elif spec.paused or (
            _latest(spec, self._plan_lower, self._plan_until) is None and not self._at_least_once
        ):
            self._enter(JobPhase.ACTIVE)
            self._orphan_checks_from(now)
        else:
            self._enter(JobPhase.PLANNING)
            self._plan_retry = now + self.tunables.answer_deadline
            orphans_since = None
            if self._at_least_once:
                orphans_since = _utc(self._plan_until - spec.catchup_window)
            self._emit(m.ReadHistory(spec.name, orphans_since))

    def _history_read(self, event: m.HistoryRead, now: float) -> None:
        if (
            self.phase is not JobPhase.PLANNING
            or self._pending_plan is not None
            or self._plan_waits
        ):
            return  # an answer for a planning that was given up
        if not event.ok:
            self._plan_retry = now + self.tunables.retry_interval
            return
        spec, schedule = self.spec, self.spec.schedule_obj
        limit = _utc(now + self.tunables.future_margin)
        recorded = [i for i in event.instants if i <= limit]
        if len(recorded) < len(event.instants):
            future = format_utc(max(event.instants))
            self._emit(m.Warn(spec.name, "future-record", f"records up to {future} are ignored"))
        lower, until = _utc(self._plan_lower), _utc(self._plan_until)
        newest = newest_scheduled(schedule, recorded)
        after = lower if newest is None else max(lower, newest)
        plan = plan_catchup(schedule, spec.catchup, spec.catchup_window, after, until)
        behind = holes(schedule, recorded, lower)
        behind = unpruned(behind, event.horizon, len(recorded), max(1, spec.history))
        self._pending_plan = _Plan(plan, behind, after)
        if self._at_least_once:
            self._queue_reruns(event.orphans, limit)  # run again with the catch-up
        if behind:
            self._plan_retry = now + self.tunables.answer_deadline
            self._emit(m.ReadRanges(spec.name, tuple(next_records(behind, recorded))))
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
        # Holes (instants behind newer records that no skip range covers): run by `all`
        # inside the window (a late claim, so never one a range has covered meanwhile;
        # its fencing token is the newer owner's, larger), recorded otherwise.
        window_start = _utc(self._plan_until - spec.catchup_window)
        refill = [h for h in behind if spec.catchup == "all" and h > window_start]
        for hole in behind:
            if hole not in refill:
                self._skip(hole, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, record=True)
        if plan.skipped and plan.first_skipped is not None:
            end = plan.run[0] - _MICRO if plan.run else _utc(self._plan_until)
            newest = spec.schedule_obj.latest_fire(after, end)
            if newest is not None:
                self._emit(
                    m.Skip(spec.name, newest, m.SkipReason.OUTSIDE_CATCHUP_WINDOW, "", plan.skipped)
                )
                self._emit(
                    m.RecordSkip(
                        spec.name,
                        newest,
                        "catchup",
                        m.SkipReason.OUTSIDE_CATCHUP_WINDOW,
                        plan.first_skipped,
                        plan.skipped,
                    )
                )
        again = set(self._reruns)
        self._queue_list().extend(
            (instant, "catchup") for instant in sorted({*refill, *plan.run, *again})
        )
        # instants that came due while the plan was made: missed by the same outage, so
        # `all` runs each of them too; otherwise only if its successor is not due by its turn
        waiting: m.FireKind = "catchup" if spec.catchup == "all" else "scheduled"
        self._queue_list().extend((instant, waiting) for instant in self._waiting)
        self._waiting_ = None
        self._enter(JobPhase.ACTIVE)
        self._orphan_checks_from(now)
        self._pump(now)

    def _catch_up_gap(self, now: float) -> None:
        """The lease is ours after instants were left waiting for it: plan a catch-up from
        the first of them (the policy runs or records them, in order, then the rest)."""
        assert self._gap is not None
        # what waited for the lease besides the gap (catch-up instants leasing or queued)
        # is planned again with it: never a plan that starts after them
        waited = [instant.timestamp() for instant, _ in self._queue]
        for fire in [f for f in self.fires.values() if f.stage is FireStage.LEASING]:
            fire.step(Step.DROPPED)
            del self.fires[fire.instant]
            self._trigger_again(fire)
            if fire.trigger is None:
                waited.append(fire.instant.timestamp())
        self.last_active = min([self._gap.timestamp() + self.spec.jitter, *waited])
        self._gap = None
        self._enter(JobPhase.INACTIVE)
        self._queue_ = None
        self._reruns_ = None
        self._activate(now)
