"""A simulated member's process table: the `Runner` (zksched/runtime/run/runner.py) the
production shell starts its commands with.

A command takes as long as the scenario's `run_of` says and ends as it says (ok, or failed:
a job with retries then runs it again); a terminated one ends a moment later. A start takes
the kernel a few milliseconds, now and then longer (a slow fork): a member that dies
meanwhile never starts it, the at-most-once window. Its commands die with their member
(zksched's reaper does that for real). What each did goes to the `Ledger`: the checker's
ground truth.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sim.ledger import Run
from zksched.core.firekey import parse_utc
from zksched.runtime.run.request import RunRequest, RunResult, RunStatus

if TYPE_CHECKING:
    from sim.member.base import MemberBase

START_DELAY = (0.0005, 0.003)  # a start's time, uniform
SLOW_START = (0.003, 0.009)  # one start in twenty takes this long
TERMINATE_DELAY = 0.005  # a terminated command's exit is seen this long after


class SimProcess:
    """One command: its run in the ledger, and whom to tell when it ends."""

    def __init__(
        self, table: ProcessTable, run: Run, on_done: Callable[[RunResult], None] | None
    ) -> None:
        self._table = table
        self.run = run
        self.on_done = on_done
        self.started_at = 0.0  # the member's clock
        self.over = False

    def terminate(self, reason: str) -> None:
        self._table.terminate(self, reason)


class ProcessTable:
    def __init__(self, member: MemberBase, kind_of: Callable[[str, Any], str]) -> None:
        """`kind_of(job, instant)`: what started the fire (scheduled, catchup, trigger)."""
        self._member = member
        self._kind_of = kind_of
        self.running: dict[int, SimProcess] = {}

    def start_delay(self) -> float:
        rng = self._member.world.rng
        return rng.uniform(*(SLOW_START if rng.random() < 0.05 else START_DELAY))

    def start(
        self,
        request: RunRequest,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
        programs: object = None,
    ) -> SimProcess:
        member, world = self._member, self._member.world
        env = request.env
        job, instant = env["ZKSCHED_JOB"], parse_utc(env["ZKSCHED_SCHEDULED"])
        run = Run(
            job,
            instant,
            self._kind_of(job, instant),
            member.name,
            member.session or 0,
            int(env["ZKSCHED_FENCING_TOKEN"]),
            world.t,
            member.now(),
            attempt=int(env["ZKSCHED_ATTEMPT"]),
        )
        process = SimProcess(self, run, on_done)
        process.started_at = member.now()
        self.running[id(process)] = process
        member.ledger.started(run, member)
        world.note(member.name, f"start {request.fire_key} token {run.token} ({run.kind})")
        seconds, status = member.run_of(job)
        world.after(seconds, self._exit, process, status)
        return process

    def terminate(self, process: SimProcess, reason: str) -> None:
        world = self._member.world
        world.note(self._member.name, f"terminate {process.run.job}: {reason}")
        world.after(TERMINATE_DELAY, self._exit, process, "terminated")

    def _exit(self, process: SimProcess, status: RunStatus) -> None:
        member = self._member
        if process.over or not member.alive:
            return
        process.over = True
        del self.running[id(process)]
        member.ledger.ended(process.run, member.world.t, status)
        if process.on_done is not None:
            code = {"ok": 0, "terminated": -15}.get(status, 1)
            error = None if status == "ok" else f"simulated {status}"
            result = RunResult(status, code, process.started_at, member.now(), error)
            process.on_done(result)

    def kill_all(self) -> None:
        """The member died: its commands with it."""
        for process in self.running.values():
            process.over = True
            self._member.ledger.ended(process.run, self._member.world.t, "killed")
        self.running.clear()
