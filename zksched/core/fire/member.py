"""All of one member's job machines, and the inputs that reach every one of them.

The shell feeds it the job table, the cluster view (this member's session and which jobs
the owner table gives it) and each job's own events, and carries out the actions it
returns. A machine lives while its job is ours or has anything in flight; when it is
forgotten, the moment it was last active here is kept, so a catch-up on taking the job
back looks back far enough.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping

from zksched.core.fire import model as m
from zksched.core.fire.job import JobFireMachine, JobPhase
from zksched.core.jobspec import JobSpec

Owns = Callable[[str, JobSpec], bool]


def _owns_nothing(_job: str, _spec: JobSpec) -> bool:
    return False


class MemberFireCore:
    def __init__(self, tunables: m.FireTunables | None = None) -> None:
        self.tunables = tunables or m.FireTunables()
        self.jobs: dict[str, JobFireMachine] = {}
        self._table: Mapping[str, tuple[JobSpec, float]] = {}
        self._session: int | None = None
        self._owns: Owns = _owns_nothing
        self._last_active: dict[str, float] = {}
        self._stopping = False
        self._takes = itertools.count(1)  # lease take ids, unique on this member

    @property
    def session(self) -> int | None:
        return self._session

    def table_changed(
        self, table: Mapping[str, tuple[JobSpec, float]], now: float
    ) -> list[m.Action]:
        """The job table: name -> (valid spec, when it last changed)."""
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
        out += self._align(now)
        return out

    def view_changed(
        self, session: int | None, owns: Owns, now: float, moved: Collection[str] | None = None
    ) -> list[m.Action]:
        """The cluster view: this member's session (None: not connected) and its share of
        the owner table. While not connected, what it owned stays known (and skips
        `not-connected`), but nothing is claimed or started.

        `moved`: the only jobs whose owner can have changed since the last view (the same
        session, a table derived from the last one); None: any job may have moved."""
        out: list[m.Action] = []
        if self._session is not None and session is not None and session != self._session:
            out += self.session_lost(now)
            moved = None
        if session != self._session:
            moved = None
        self._session = session
        if session is not None:
            self._owns = owns
        for machine in self.jobs.values():
            out += machine.set_session(session, now)
        out += self._align(now) if moved is None else self._align_jobs(moved, now)
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
        return self._align(now)

    def handle(self, job: str, event: m.JobEvent, now: float) -> list[m.Action]:
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
        out = machine.handle(event, now)
        if machine.idle:
            self._drop(job, machine)
        return out

    def busy(self) -> bool:
        """Anything in flight on this member (a graceful stop waits for it)."""
        return any(machine.fires for machine in self.jobs.values())

    def owned(self) -> list[str]:
        return sorted(n for n, mc in self.jobs.items() if mc.owned)

    # -- internals ------------------------------------------------------------------------

    def _align(self, now: float) -> list[m.Action]:
        out: list[m.Action] = []
        connected = self._session is not None
        if connected:  # not connected: keep what we owned, as we owned it
            for name, (spec, updated_at) in self._table.items():
                out += self._align_job(name, spec, updated_at, now)
        if self._stopping or connected:
            for name, machine in self.jobs.items():
                if (name not in self._table or self._stopping) and machine.owned:
                    out += machine.set_owned(False, now)
        self._forget()
        return out

    def _align_jobs(self, names: Collection[str], now: float) -> list[m.Action]:
        """`_align` for the jobs that moved (a membership change, same session)."""
        out: list[m.Action] = []
        for name in sorted(names):  # one order whatever the set's: a run can be replayed
            entry = self._table.get(name)
            if entry is not None:
                out += self._align_job(name, entry[0], entry[1], now)
        self._forget()
        return out

    def _align_job(
        self, name: str, spec: JobSpec, updated_at: float, now: float
    ) -> list[m.Action]:
        mine = not self._stopping and self._owns(name, spec)
        machine = self.jobs.get(name)
        if machine is None:
            if not mine:
                return []
            since = self._last_active.get(name)
            machine = JobFireMachine(spec, updated_at, self.tunables, since, self._takes)
            self.jobs[name] = machine
            out = machine.set_session(self._session, now)
        else:
            out = []
        if machine.owned != mine:
            out += machine.set_owned(mine, now)
        return out

    def _forget(self) -> None:
        for name, machine in list(self.jobs.items()):
            if machine.idle:
                self._drop(name, machine)

    def _drop(self, name: str, machine: JobFireMachine) -> None:
        del self.jobs[name]
        if machine.last_active is not None and name in self._table:
            self._last_active[name] = machine.last_active
