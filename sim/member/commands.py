"""The simulated commands: a fire's command starts, takes its time, and exits or is killed.

A command takes as long as the scenario's `run_of` says, and ends as it says (ok, or failed:
a job with retries is then run again). A crash takes its commands with
it (zksched's supervisor does that for real); what each did is written to the `Ledger`.
"""

from __future__ import annotations

from datetime import datetime

from sim.ledger import Run
from sim.member.base import MemberBase
from zksched.core.fire import model as m
from zksched.core.firekey import format_utc


class Commands(MemberBase):
    """Starting, ending and killing commands (a part of `SimMember`)."""

    def _start(
        self, job: str, instant: datetime, kind: str, token: int, attempt: int, incarnation: int
    ) -> None:
        if incarnation != self.incarnation or not self.alive:
            return  # killed between its claim and its start: the at-most-once window
        run = Run(
            job,
            instant,
            kind,
            self.name,
            self.session or 0,
            token,
            self.world.t,
            self.now(),
            attempt=attempt,
        )
        self.runs[(job, instant)] = run
        self.ledger.started(run, self)
        self._event(job, m.Started(instant))
        seconds, status = self.run_of(job)
        self.world.after(seconds, self._exit, run, status, self.incarnation)

    def _exit(self, run: Run, status: str, incarnation: int) -> None:
        if incarnation != self.incarnation or self.runs.get((run.job, run.instant)) is not run:
            return
        del self.runs[(run.job, run.instant)]
        self.ledger.ended(run, self.world.t, status)
        self._event(run.job, m.Exited(run.instant, status))

    def _terminate(self, run: Run, why: str) -> None:
        self.world.note(self.name, f"terminate {run.job}@{format_utc(run.instant)}: {why}")
        self.world.after(0.005, self._exit, run, "terminated", self.incarnation)
