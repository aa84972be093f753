"""All of one member's job machines, and the inputs that reach every one of them.

The shell feeds it the job table, the cluster view (this member's session and which jobs
the owner table gives it) and each job's own events, and carries out the actions it
returns. A machine lives while its job is ours or has anything in flight; when it is
forgotten, the moment it was last active here is kept, so a catch-up on taking the job
back looks back far enough.

Aligning the machines with a new table or view (each job taken, dropped or left) may be
done a slice at a time (`limit`, then `align` until `aligning` is False): a member taking
a million jobs still answers its other events, and a newer view redirects what is left.
A job not aligned yet keeps its machine as it was, as if the change had not reached this
member yet (what the claims decide, exclusive in ZooKeeper, never depends on it).

A job taken with nothing to catch up and its next fire beyond `dormant_horizon` is
*dormant*: owned, but without a machine until that horizon (`wake_due`, on the shell's one
timer for every dormant job: `next_wake`), a trigger or a change wakes it. A machine made
then acts exactly as one made at the takeover would have: nothing was due meanwhile, so its
catch-up finds nothing either. At-least-once jobs are never dormant (their machines look
for orphaned claims while active).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping

from zksched.core.fire import model as m
from zksched.core.fire.dormancy import DormantJobs
from zksched.core.fire.job import JobFireMachine, JobPhase
from zksched.core.fire.state import _latest, _utc, due_of, plan_lower
from zksched.core.jobspec import JobSpec
from zksched.core.names import JobNames
from zksched.core.schedule import ScheduleError

Owns = Callable[[str, JobSpec], bool]
FIRSTS_KEPT = 100_000  # (schedule, catch-up bound) pairs remembered by _first_after


def owns_nothing(_job: str, _spec: JobSpec) -> bool:
    """What a member not in the view owns (the shell says so with this very function: then
    only the jobs in hand can need aligning)."""
    return False


class MemberFireCore:
    def __init__(self, tunables: m.FireTunables | None = None) -> None:
        self.tunables = tunables or m.FireTunables()
        self.jobs: dict[str, JobFireMachine] = {}
        self._table: Mapping[str, tuple[JobSpec, float]] = {}
        self._session: int | None = None
        self._owns: Owns = owns_nothing
        self._last_active: dict[str, float] = {}
        self._dormant = DormantJobs()  # owned jobs without a machine, and when each wakes
        self._stopping = False
        self._takes = itertools.count(1)  # lease take ids, unique on this member
        # jobs left to align: the moved ones first, then a sweep of every job (a snapshot of
        # the names, not a copy of the table: a million jobs). A deque and a set, not a dict
        # emptied from its front: each next() on such a dict skips every deleted slot, so
        # taking n jobs cost n² steps.
        self._moved: deque[str] = deque()
        self._moving: set[str] = set()  # the names in _moved
        self._sweep: list[str] = []
        self._swept = 0  # how many of the sweep's names are done
        # each schedule's first instant after a catch-up bound, shared by the jobs of one
        # schedule changed together (a takeover of a million daily jobs asks it of at most
        # 86,400 schedules); pure, so never stale; emptied when it grows past FIRSTS_KEPT
        self._firsts: dict[tuple[str, str, float], float | None] = {}

    @property
    def session(self) -> int | None:
        return self._session

    @property
    def aligning(self) -> bool:
        """Jobs are left to align with the latest table and view (`align` does them)."""
        return bool(self._moved) or self._swept < len(self._sweep)

    def table_changed(
        self, table: Mapping[str, tuple[JobSpec, float]], now: float, limit: int | None = None
    ) -> list[m.Action]:
        """The job table: name -> (valid spec, when it last changed). `limit`: align at
        most that many jobs now (None: all of them)."""
        out: list[m.Action] = []
        old, self._table = self._table, table
        for name, machine in list(self.jobs.items()):
            entry = table.get(name)
            if entry is None:
                if machine.phase is not JobPhase.DELETED:
                    out += machine.delete(now)
            elif entry != (machine.spec, machine.updated_at):
                out += machine.set_spec(entry[0], entry[1], now)
        for name in [n for n in self._last_active if table.get(n) != old.get(n)]:
            del self._last_active[name]  # deleted or changed: planned from its change
        for name in [n for n in self._dormant if table.get(n) != old.get(n)]:
            # at once, as a machine is told (the sweep below may take many turns): deleted,
            # it is forgotten; changed, it gets its machine, planned from its change
            out += self._wake(name, now)
        self._realign(None)
        out += self.align(now, limit)
        return out

    def view_changed(
        self,
        session: int | None,
        owns: Owns,
        now: float,
        moved: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[m.Action]:
        """The cluster view: this member's session (None: not connected) and its share of
        the owner table. While not connected, what it owned stays known (and skips
        `not-connected`), but nothing is claimed or started.

        `moved`: the only jobs whose owner can have changed since the last view (the same
        session, a table derived from the last one), aligned in their order if `JobNames`,
        else sorted; None: any job may have moved.
        `limit`: align at most that many jobs now (None: all of them)."""
        out: list[m.Action] = []
        renewed = session != self._session
        if renewed and self._session is not None and session is not None:
            out += self.session_lost(now)
        self._session = session
        if session is not None:
            self._owns = owns
        if renewed:  # every machine is told, and every job looked at; else the moved alone
            for machine in self.jobs.values():
                out += machine.set_session(session, now)
        self._realign(None if renewed else moved)
        out += self.align(now, limit)
        return out

    def session_lost(self, now: float) -> list[m.Action]:
        out: list[m.Action] = []
        for machine in self.jobs.values():
            out += machine.session_lost(now)
        self._session = None
        self._forget()
        return out

    def stop(self, now: float) -> list[m.Action]:
        """A graceful stop: own nothing from now on (leases go back as runs end)."""
        self._stopping = True
        # a dormant job holds nothing (no machine, lease or fire) and a stopping member
        # never owns a job again: it is forgotten at once; only what is in hand is aligned,
        # so a member stopping with a million dormant jobs gives its busy ones back first
        self._dormant.clear()
        self._sweep_over(self._in_hand_first(list(self.jobs)))
        return self.align(now, None)

    def align(self, now: float, limit: int | None) -> list[m.Action]:
        """Align up to `limit` jobs (None: every one left) with the table and view."""
        out: list[m.Action] = []
        for name in itertools.islice(self._left_to_align(), limit):
            out += self._align_name(name, now)
            self._forget_if_idle(name)
        if not self.aligning:
            self._sweep, self._swept = [], 0
            self._forget()
        return out

    def handle(self, job: str, event: m.JobEvent, now: float) -> list[m.Action]:
        machine = self.jobs.get(job)
        woken: list[m.Action] = []
        wake = self._dormant.get(job) if machine is None else None
        if wake is not None and (
            isinstance(event, m.Triggered) or (isinstance(event, m.Tick) and wake <= now)
        ):
            woken = self._wake(job, now)
            machine = self.jobs.get(job)
        if machine is None:
            if isinstance(event, m.LeaseAnswered) and event.outcome is m.LeaseOutcome.TAKEN:
                return [m.GiveBackLease(job, event.take)]  # taken after it was given up
            if isinstance(event, m.Triggered):
                return [m.ReturnTrigger(job, event.trigger_id)]  # taken as the job moved
            if isinstance(event, m.Tick | m.HistoryRead | m.RangesRead | m.OrphansFound):
                return []  # for a machine forgotten since (a timer, a read), or not ours
            if isinstance(event, m.LeaseAnswered):
                return []
            raise KeyError(f"no fire machine for job {job!r} ({type(event).__name__})")
        out = woken + machine.handle(event, now)
        self._forget_if_idle(job)
        return out + self._rest(job, now)

    def busy(self) -> bool:
        """Anything in flight on this member (a graceful stop waits for it)."""
        return any(machine.fires for machine in self.jobs.values())

    def owned(self) -> list[str]:
        return sorted(self.owned_set())

    def owned_set(self) -> frozenset[str]:
        """The jobs this member owns (with a machine, or dormant)."""
        return frozenset([n for n, mc in self.jobs.items() if mc.owned] + list(self._dormant))

    @property
    def next_wake(self) -> float | None:
        """When the earliest dormant job wakes: the shell's one timer for all of them."""
        return self._dormant.next_wake

    def wake_due(self, now: float) -> list[m.Action]:
        """The dormant jobs whose wake has come get their machines (as a timer of each)."""
        out: list[m.Action] = []
        for name in self._dormant.due(now):
            out += self.handle(name, m.Tick(), now)
        return out

    @property
    def dormant(self) -> int:
        """How many owned jobs have no machine until their next fire comes near."""
        return len(self._dormant)

    # -- internals ------------------------------------------------------------------------

    def _left_to_align(self) -> Iterator[str]:
        """The jobs left to align, each taken off as it comes: the moved first, then the
        sweep (aligning one job moves no other)."""
        while self._moved:
            name = self._moved.popleft()
            self._moving.discard(name)
            yield name
        while self._swept < len(self._sweep):
            self._swept += 1
            yield self._sweep[self._swept - 1]

    def _realign(self, moved: Collection[str] | None) -> None:
        """Jobs to align: those that moved, or (None) every job in the table or in hand;
        those holding a fire or a lease first (another member taking one over waits for it,
        not for the bulk of dormant jobs)."""
        if moved is None and self._owns is owns_nothing:
            # a job neither in hand nor owned has nothing to align: a member waiting to join
            # sweeps none of a million jobs
            names = [*self.jobs, *(n for n in self._dormant if n not in self.jobs)]
            self._sweep_over(self._in_hand_first(names))
        elif moved is None:
            names = list(self._table)
            names += [n for n in self.jobs if n not in self._table]
            names += [n for n in self._dormant if n not in self._table and n not in self.jobs]
            self._sweep_over(self._in_hand_first(names))
        else:
            in_hand = [n for n in self._in_hand() if n in moved]
            # one order whatever the set's, so that a run can be replayed: the one the
            # names came in, or theirs sorted
            ordered = moved.in_order if isinstance(moved, JobNames) else sorted(moved)
            fresh = dict.fromkeys(itertools.chain(in_hand, ordered))
            if self._moving:  # what is queued already keeps its place
                fresh = dict.fromkeys(n for n in fresh if n not in self._moving)
            self._moving.update(fresh)
            self._moved.extend(fresh)

    def _in_hand(self) -> list[str]:
        """The jobs whose machines hold a fire or the lease, by name (not dict order: it
        differs between a core with dormant jobs and one with every machine)."""
        return sorted(n for n, mc in self.jobs.items() if mc.in_hand)

    def _in_hand_first(self, names: list[str]) -> list[str]:
        """`names` (every job in hand among them), those holding a fire or a lease first."""
        in_hand = self._in_hand()
        if not in_hand:
            return names
        first = set(in_hand)
        return in_hand + [n for n in names if n not in first]

    def _sweep_over(self, names: list[str]) -> None:
        """Align `names` (and nothing queued before)."""
        self._sweep, self._swept = names, 0
        self._moved.clear()
        self._moving.clear()

    def _align_name(self, name: str, now: float) -> list[m.Action]:
        entry = self._table.get(name)
        connected = self._session is not None
        if entry is not None and connected:
            return self._align_job(name, entry[0], entry[1], now)
        # gone from the table, or stopping: give it up; not connected: keep what we owned
        if name in self._dormant and (self._stopping or entry is None):
            self._leave_dormant(name, now)
        machine = self.jobs.get(name)
        if (
            machine is not None
            and machine.owned
            and (self._stopping or (entry is None and connected))
        ):
            return machine.set_owned(False, now)
        return []

    def _align_job(self, name: str, spec: JobSpec, updated_at: float, now: float) -> list[m.Action]:
        mine = not self._stopping and self._owns(name, spec)
        machine = self.jobs.get(name)
        if machine is None:
            if not mine:
                if name in self._dormant:
                    self._leave_dormant(name, now)
                return []
            wake = self._dormant_until(name, spec, updated_at, now)
            if wake is not None:
                if self._dormant.get(name) != wake:
                    self._dormant.sleep(name, wake)
                return []
            self._dormant.discard(name)
            machine = self._new_machine(name, spec, updated_at, now)
            out = machine.set_session(self._session, now)
        else:
            out = []
        if machine.owned != mine:
            out += machine.set_owned(mine, now)
        return out

    def _new_machine(
        self, name: str, spec: JobSpec, updated_at: float, now: float
    ) -> JobFireMachine:
        since = self._last_active.get(name)
        machine = JobFireMachine(spec, updated_at, self.tunables, since, self._takes)
        self.jobs[name] = machine
        return machine

    def _dormant_until(
        self, name: str, spec: JobSpec, updated_at: float, now: float
    ) -> float | None:
        """When a job taken now may wake to be fired (its next fire's due time less the
        horizon), or None: it needs its machine now (something to catch up or look for,
        its next fire near, or none to come). What its machine would plan now, it would
        plan then too: the same lower bound, and no instant between."""
        horizon = self.tunables.dormant_horizon
        if (
            horizon <= 0
            or self._session is None
            or spec.delivery == "at-least-once"
            or spec.jitter >= horizon  # its instants' due times may pass one another
        ):
            return None
        since = self._last_active.get(name)
        lower = plan_lower(spec, updated_at, since)
        until = now - spec.jitter
        if spec.jitter <= 0 and lower < until:
            # no instant in (lower, until] (nothing to catch up) exactly when the first one
            # after `lower` comes later, and that one is then the next fire
            first = self._first_after(spec, lower)
            if first is None or first <= until:
                return None
            wake = first - horizon
            return wake if wake > now else None
        try:
            if _latest(spec, lower, until) is not None:
                return None  # a catch-up to plan: its history is read now
            instant = spec.schedule_obj.next_fire(_utc(until))
        except ScheduleError:
            return None
        wake = due_of(spec, instant) - horizon
        return wake if wake > now else None

    def _first_after(self, spec: JobSpec, lower: float) -> float | None:
        """The job's first instant after `lower` (epoch seconds), None if none comes."""
        key = (spec.schedule, spec.timezone, lower)  # what schedule_obj is parsed from
        if key not in self._firsts:
            if len(self._firsts) >= FIRSTS_KEPT:
                self._firsts.clear()
            try:
                self._firsts[key] = spec.schedule_obj.next_fire(_utc(lower)).timestamp()
            except ScheduleError:
                self._firsts[key] = None
        return self._firsts[key]

    def _wake(self, name: str, now: float) -> list[m.Action]:
        """A dormant job gets its machine: its next fire comes near, or an event is for it."""
        self._dormant.discard(name)
        entry = self._table.get(name)
        if entry is None:
            return []  # deleted meanwhile (while not connected): nothing to wake
        spec, updated_at = entry
        machine = self._new_machine(name, spec, updated_at, now)
        return machine.set_session(self._session, now) + machine.set_owned(True, now)

    def _rest(self, name: str, now: float) -> list[m.Action]:
        """An owned machine with nothing in hand whose next fire is far goes dormant."""
        machine = self.jobs.get(name)
        if machine is None:
            return []
        wake = machine.rest_until(now, self.tunables.dormant_horizon)
        if wake is None:
            return []
        del self.jobs[name]
        self._last_active[name] = machine.resting_since()
        self._dormant.sleep(name, wake)
        return []

    def _leave_dormant(self, name: str, now: float) -> None:
        """A dormant job is ours no more: active here until now, as its machine would say."""
        self._dormant.discard(name)
        if name in self._table:
            self._last_active[name] = now

    def _forget(self) -> None:
        for name in list(self.jobs):
            self._forget_if_idle(name)

    def _forget_if_idle(self, name: str) -> None:
        machine = self.jobs.get(name)
        if machine is not None and machine.idle:
            self._drop(name, machine)

    def _drop(self, name: str, machine: JobFireMachine) -> None:
        del self.jobs[name]
        if machine.last_active is not None and name in self._table:
            self._last_active[name] = machine.last_active
