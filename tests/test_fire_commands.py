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
from zksched.runtime.fire.tuning import STARTS_SETTLE


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
