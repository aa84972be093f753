"""`RunActions.starting()`: what the result writer waits for while a burst is started
(zksched/runtime/fire/run_actions.py). A fake runner: the starts are what is under test."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.runtime.fire.run_actions import FireSettings, RunActions
from zksched.runtime.fire.tuning import STARTERS, STARTS_SETTLE


class Handle:
    def terminate(self, why: str) -> None:
        pass


class GatedRunner:
    """Each start blocks until `go` is set (a slow fork under load)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.started = threading.Semaphore(0)

    def start(self, request: Any, done: Callable[[Any], None], programs: Any = None) -> Handle:
        self.started.release()
        assert self.go.wait(10)
        return Handle()


def commands(runner: GatedRunner) -> RunActions:
    spec = JobSpec(name="job", schedule="* * * * * *", command=("true",))
    return RunActions(
        runner,  # type: ignore[arg-type]
        FireSettings(client_id="c", member_id="m-1"),
        lambda _job: spec,
        lambda _step: None,
        lambda _job, _event, _now: [],
    )


def test_starting_while_a_start_is_under_way_and_a_moment_after() -> None:
    runner = GatedRunner()
    fire = commands(runner)
    try:
        assert not fire.starting()
        start = m.Start("job", datetime(2026, 1, 1, tzinfo=UTC), "scheduled", 1)
        fire.start(start, time.time())
        assert runner.started.acquire(timeout=10)
        assert fire.starting()  # the start waits for the kernel
        runner.go.set()
        deadline = time.monotonic() + 10
        while fire.starting() and time.monotonic() < deadline:
            time.sleep(STARTS_SETTLE / 5)
        assert not fire.starting(), "still 'starting' long after the start was through"
    finally:
        runner.go.set()
        fire.close()


def test_a_failed_start_is_through_too() -> None:
    class Failing(GatedRunner):
        def start(self, request: Any, done: Callable[[Any], None], programs: Any = None) -> Handle:
            raise OSError("fork failed")

    fire = commands(Failing())
    try:
        fire.start(m.Start("job", datetime(2026, 1, 1, tzinfo=UTC), "scheduled", 1), time.time())
        deadline = time.monotonic() + 10
        while fire.starting() and time.monotonic() < deadline:
            time.sleep(STARTS_SETTLE / 5)
        assert not fire.starting()
    finally:
        fire.close()


class CountingRunner:
    def __init__(self) -> None:
        self.started: list[str] = []

    def start(self, request: Any, done: Callable[[Any], None], programs: Any = None) -> Handle:
        self.started.append(request.fire_key)
        return Handle()


def posting_commands(runner: Any, concurrency: int) -> tuple[RunActions, list[Any]]:
    """RunActions whose posts to the core are kept (run them to see the core's events)."""
    spec = JobSpec(name="job", schedule="* * * * * *", command=("true",))
    posted: list[Any] = []
    fire = RunActions(
        runner,
        FireSettings(client_id="c", member_id="m-1", concurrency=concurrency),
        lambda _job: spec,
        posted.append,
        lambda _job, event, _now: [posted.append(event)][:0],  # type: ignore[func-returns-value]
    )
    return fire, posted


def events_of(posted: list[Any]) -> list[Any]:
    """Run the posted steps (the core's thread would) and keep the events they hand on."""
    seen: list[Any] = []
    while posted:
        step = posted.pop(0)
        if callable(step):
            step(time.time())
        else:
            seen.append(step)
    return seen


def test_a_start_waiting_for_a_slot_and_terminated_never_starts() -> None:
    """The core terminates its fires when the session may be lost: one still waiting for a
    concurrency slot must not start once a slot frees (it would run without a live claim's
    session); it ends `terminated`, with no process."""
    runner = CountingRunner()
    fire, posted = posting_commands(runner, concurrency=1)
    first, second = (datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in (0, 1))
    try:
        fire.start(m.Start("job", first, "scheduled", 1), time.time())
        fire.start(m.Start("job", second, "scheduled", 1), time.time())  # waits for the slot
        deadline = time.monotonic() + 10
        while len(runner.started) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        fire.terminate_fire("job", second, "session lost")
        fire.close()  # the starters are through
        assert runner.started == ["job@2026-01-01T00:00:00Z"]
        events = events_of(posted)
        assert m.Started(second) in events
        assert fire.finals[("job", second)].status == "terminated"
        assert fire.finals[("job", second)].error == "not started: session lost"
    finally:
        fire.close()


def test_a_run_terminated_before_a_starter_came_to_it_is_not_started() -> None:
    """Every starter busy (slow forks), one more run queued for them: terminated then, it
    is reported `terminated` and no process is started for it."""
    runner = GatedRunner()
    fire, posted = posting_commands(runner, concurrency=STARTERS + 1)
    instants = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(STARTERS + 1)]
    try:
        for instant in instants:
            fire.start(m.Start("job", instant, "scheduled", 1), time.time())
        for _ in range(STARTERS):
            assert runner.started.acquire(timeout=10)
        fire.terminate_fire("job", instants[-1], "session lost")
        runner.go.set()
        fire.close()
        assert not runner.started.acquire(timeout=0.2), "the terminated run was started"
        events_of(posted)
        assert fire.finals[("job", instants[-1])].status == "terminated"
    finally:
        runner.go.set()
        fire.close()
