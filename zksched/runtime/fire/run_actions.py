"""Starting and stopping the fire core's commands (its Start and Terminate actions), and
reporting each run: the log line, metrics' observers, the result kept for its record.

Starts go to a few threads of their own (a start waits for the kernel, not for the
interpreter), never more commands at once than `--concurrency` (the rest wait for a slot),
none once the daemon is stopping (recorded `error`, "not started"). `starting()` says
whether starts are under way (or were a moment ago): results wait meanwhile (results.py).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from zksched.core.allowlist import command_refusal
from zksched.core.fire import model as m
from zksched.core.fire.state import due_of
from zksched.core.firekey import FireId, fire_key
from zksched.core.jobspec import JobSpec
from zksched.runtime.clock import Clock
from zksched.runtime.fire.tuning import PROGRAM_LOOKUP_TTL, STARTERS, STARTS_SETTLE
from zksched.runtime.host import Host, ThreadHost
from zksched.runtime.run import (
    Fire,
    FunctionRunner,
    ProgramLookup,
    Runner,
    RunRequest,
    RunResult,
    StartedRun,
)

log = logging.getLogger("zksched.fire")

CoreCall = Callable[[float], list[m.Action]]  # a turn of the core's thread: now -> actions


@dataclass(frozen=True)
class FireSettings:
    client_id: str
    member_id: str
    on_session_loss: Literal["terminate", "continue"] = "terminate"
    call_timeout: float = 3.0
    allowed_commands: tuple[str, ...] | None = None  # None: every command may run here
    concurrency: int = 32  # commands running at once on this member


@dataclass
class FireStats:
    """Counters for tests, benchmarks and metrics."""

    fired: int = 0
    results: dict[str, int] = field(default_factory=dict)


@dataclass
class _Run:
    start: m.Start
    spec: JobSpec
    t_due: float
    t_claimed: float
    command: StartedRun | None = None
    terminate_now: str | None = None  # a terminate that came before the start was through


class RunActions:
    def __init__(
        self,
        runner: Runner,
        settings: FireSettings,
        spec_of: Callable[[str], JobSpec | None],
        post: Callable[[CoreCall], None],
        handle: Callable[[str, m.JobEvent, float], list[m.Action]],
        functions: FunctionRunner | None = None,
        host: Host | None = None,
    ) -> None:
        host = host or ThreadHost(Clock())
        self._clock = host.clock
        self._runner = runner
        self._functions = functions  # an app member's (zksched.Cluster); None: a daemon
        self._settings = settings
        self._spec_of = spec_of
        self._post = post
        self._handle = handle
        self._starters = host.starters("zksched-start", STARTERS)
        self.runs: dict[FireId, _Run] = {}
        self.finals: dict[FireId, RunResult] = {}  # results, until the core asks to write them
        # over --concurrency: started as slots free up, in order (removed by key at a terminate)
        self._waiting_starts: OrderedDict[FireId, _Run] = OrderedDict()
        self._launch_mutex = threading.Lock()
        self._launching = 0  # starts handed to the starter threads and not through yet
        self._last_launch = 0.0  # monotonic
        self._programs = ProgramLookup()  # argv[0] in PATH, for the starts of a moment
        self._programs_since = 0.0  # monotonic
        self.terminating = False
        self.stats = FireStats()
        self.observers: list[Callable[[Mapping[str, object]], None]] = []

    def _post_event(self, job: str, event: m.JobEvent) -> None:
        self._post(lambda now: self._handle(job, event, now))

    def terminate_fire(self, job: str, instant: datetime, why: str) -> None:
        """The core's Terminate: a run waiting for a slot never starts either (it goes the
        way of a run terminated before its start was through: no process, `terminated`)."""
        run = self.runs.get((job, instant))
        if run is not None:
            self.terminate(run, why)
            return
        waiting = self._waiting_starts.pop((job, instant), None)
        if waiting is not None:
            waiting.terminate_now = why
            self._spawn(waiting)  # reported terminated, never started

    def terminate_all(self, why: str) -> None:
        self.terminating = True
        for run in list(self.runs.values()):
            self.terminate(run, why)

    def close(self) -> None:
        self._starters.shutdown(wait=True)

    def starting(self) -> bool:
        """Whether commands are being started, or were within the last `STARTS_SETTLE` s
        (fires due together are claimed and started a few at a time)."""
        with self._launch_mutex:
            if self._launching or self._waiting_starts:
                return True
            return self._clock.monotonic() - self._last_launch < STARTS_SETTLE

    def start(self, start: m.Start, now: float) -> None:
        spec = self._spec_of(start.job)
        if spec is None:  # gone from the table since: the core records it as an error
            self._post_event(start.job, m.StartFailed(start.instant, "the job is gone"))
            return
        run = _Run(start, spec, due_of(spec, start.instant), now)
        why = self._refusal(spec)
        if why is not None:
            self._post_event(start.job, m.StartFailed(start.instant, why))
            return
        if len(self.runs) >= self._settings.concurrency:
            self._waiting_starts[(start.job, start.instant)] = run
            return
        self._spawn(run)

    def _refusal(self, spec: JobSpec) -> str | None:
        """Why this member cannot run the job (the owner table moved it here all the same:
        a view that changed meanwhile), or None."""
        if spec.kind == "function":
            if self._functions is None or not self._functions.registered(spec.name):
                return f"function job {spec.name} is not registered on this member"
            return None
        if self._functions is not None:
            return "this member is an app's: it runs function jobs only"
        return command_refusal(self._settings.allowed_commands, spec.command[0], spec.env.keys())

    def _spawn(self, run: _Run) -> None:
        start, spec = run.start, run.spec
        key = (start.job, start.instant)
        if self.terminating:
            self._post_event(
                start.job, m.StartFailed(start.instant, "not started: the daemon is stopping")
            )
            return
        self.runs[key] = run

        def done(result: RunResult) -> None:
            # reported on the run's completion thread: the core's thread, which every
            # fire's events pass through, does only what decides or starts something
            self._report(run, result)
            self._post(lambda now: self._exited(run, result, now))

        # queued before the run can end: the core sees its start before its exit
        self._post_event(start.job, m.Started(start.instant))
        if run.terminate_now is not None:  # terminated while it waited for a slot
            return self._not_started(run.terminate_now, done)
        if spec.kind == "function":
            self._call(run, done)
        else:
            self._start_command(run, done)

    def _start_command(self, run: _Run, done: Callable[[RunResult], None]) -> None:
        start, spec = run.start, run.spec
        fire = fire_key(start.job, start.instant)
        env = dict(spec.env)
        env.update(
            ZKSCHED_JOB=spec.name,
            ZKSCHED_SCHEDULED=fire.split("@", 1)[1],
            ZKSCHED_FIRE_KEY=fire,
            ZKSCHED_MEMBER_ID=self._settings.member_id,
            ZKSCHED_CLIENT_ID=self._settings.client_id,
            ZKSCHED_FENCING_TOKEN=str(start.token),
            ZKSCHED_ATTEMPT=str(start.attempt),
        )
        request = RunRequest(
            job=spec.name,
            fire_key=fire,
            argv=tuple(spec.command),
            env=env,
            cwd=spec.workdir,
            timeout=spec.timeout,
        )
        with self._launch_mutex:
            self._launching += 1
        try:  # a start waits for the kernel: off the core's thread, a few at a time
            self._starters.submit(self._launch, run, request, done)
        except RuntimeError:  # stopping: started here, as the stop waits for it
            self._launch(run, request, done)

    def _call(self, run: _Run, done: Callable[[RunResult], None]) -> None:
        """A function job's start: on the runner's pool (a start here never blocks)."""
        assert self._functions is not None  # _refusal let it through
        start = run.start
        fire = Fire(
            job=start.job,
            key=fire_key(start.job, start.instant),
            scheduled=start.instant,
            fencing_token=start.token,
            member_id=self._settings.member_id,
            attempt=start.attempt,
        )
        run.command = self._functions.start(fire, run.spec.timeout, done)
        with self._launch_mutex:  # results wait while fires due together start, as for commands
            self._last_launch = self._clock.monotonic()
        if run.terminate_now is not None:
            run.command.terminate(run.terminate_now)

    def _launch(self, run: _Run, request: RunRequest, done: Callable[[RunResult], None]) -> None:
        try:
            if (why := run.terminate_now) is not None:  # terminated while it waited a starter
                return self._not_started(why, done)
            run.command = self._runner.start(request, done, programs=self._lookup())
        finally:
            with self._launch_mutex:
                self._launching -= 1
                self._last_launch = self._clock.monotonic()
        if run.terminate_now is not None:  # terminated before its start was through
            run.command.terminate(run.terminate_now)

    def _not_started(self, why: str, done: Callable[[RunResult], None]) -> None:
        at = self._clock.now()
        done(RunResult("terminated", None, at, at, f"not started: {why}"))

    def _lookup(self) -> ProgramLookup:
        """The lookup of argv[0] for the starts of this moment (many commands due together
        look their program up once; one installed meanwhile is seen a moment later)."""
        now = self._clock.monotonic()
        with self._launch_mutex:
            if now - self._programs_since > PROGRAM_LOOKUP_TTL:
                self._programs, self._programs_since = ProgramLookup(), now
            return self._programs

    def _exited(self, run: _Run, result: RunResult, now: float) -> list[m.Action]:
        key = (run.start.job, run.start.instant)
        self.runs.pop(key, None)
        self.finals[key] = result
        while self._waiting_starts and len(self.runs) < self._settings.concurrency:
            self._spawn(self._waiting_starts.popitem(last=False)[1])  # the freed slot first
        return self._handle(run.start.job, m.Exited(run.start.instant, result.status), now)

    def terminate(self, run: _Run, why: str) -> None:
        log.warning(
            "%s: %s; terminating the command",
            fire_key(run.start.job, run.start.instant),
            why,
            extra={"event": "terminate", "fire_key": fire_key(run.start.job, run.start.instant)},
        )
        run.terminate_now = why  # _launch terminates it once started, if it is not yet
        command = getattr(run, "command")  # noqa: B009 - read again: _launch may have set it
        if command is not None:
            command.terminate(why)

    def _report(self, run: _Run, result: RunResult) -> None:
        start = run.start
        self.stats.fired += 1
        self.stats.results[result.status] = self.stats.results.get(result.status, 0) + 1
        key = fire_key(start.job, start.instant)
        event = {
            "event": "fire",
            "job": start.job,
            "fire_key": key,
            "kind": start.kind,
            "status": result.status,
            "exit_code": result.exit_code,
            "fencing_token": start.token,
            "attempt": start.attempt,
            "scheduled_ts": run.t_due,
            "claimed_ts": run.t_claimed,
            "started_ts": result.started_at,
            "finished_ts": result.finished_at,
            "delay_ms": round((result.started_at - run.t_due) * 1000, 2),
        }
        log.info(
            "%s %s (exit %s, started %.0f ms after due)",
            key if start.attempt == 1 else f"{key} attempt {start.attempt}",
            result.status,
            result.exit_code,
            (result.started_at - run.t_due) * 1000,
            extra=event,
        )
        for observer in self.observers:
            observer(event)
