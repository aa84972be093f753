"""FunctionRunner: how a function job's run starts, ends, and is told to stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from zksched.runtime.run.functions import Fire, FunctionRunner
from zksched.runtime.run.request import RunResult


def fire(job: str = "job") -> Fire:
    instant = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    return Fire(job, f"{job}@2026-12-03T09:00:00Z", instant, 7, "m1")


def run(
    function: Callable[[Fire], Any], timeout: float | None = None, stop: str | None = None
) -> tuple[RunResult, Fire]:
    runner = FunctionRunner({"job": function}, workers=2)
    results: list[RunResult] = []
    done = threading.Event()
    the_fire = fire()

    def on_done(result: RunResult) -> None:
        results.append(result)
        done.set()

    handle = runner.start(the_fire, timeout, on_done)
    if stop is not None:
        handle.terminate(stop)
    assert done.wait(10), "the run never ended"
    runner.close()
    assert handle.wait(0) == results[0] and len(results) == 1
    return results[0], the_fire


def test_a_function_that_returns_is_ok_and_gets_its_fire() -> None:
    seen: list[Fire] = []
    result, the_fire = run(seen.append)
    assert result.status == "ok" and result.exit_code == 0 and result.error is None
    assert seen == [the_fire] and seen[0].fencing_token == 7


def test_an_exception_is_failed_with_its_type_and_message() -> None:
    def broken(_fire: Fire) -> None:
        raise KeyError("customer 42")

    result, _ = run(broken)
    assert result.status == "failed"
    assert result.error == "raised KeyError: 'customer 42'"


def test_an_async_function_hidden_behind_a_plain_callable_fails_rather_than_ok() -> None:
    ran: list[Fire] = []

    class Job:
        async def __call__(self, fire: Fire) -> None:
            ran.append(fire)

    result, _ = run(Job())
    assert not ran and result.status == "failed"
    assert result.error is not None and "returned an awaitable that nothing awaits" in result.error


def test_sys_exit_in_a_function_still_ends_the_run() -> None:
    def leaves(_fire: Fire) -> None:
        raise SystemExit(3)

    result, _ = run(leaves)
    assert result.status == "failed" and "SystemExit" in (result.error or "")


def test_a_timeout_sets_cancelled_and_the_run_ends_when_the_function_returns() -> None:
    def slow(f: Fire) -> None:
        assert f.cancelled.wait(10), "never told to stop"

    result, the_fire = run(slow, timeout=0.2)
    assert the_fire.cancelled.is_set()
    assert result.status == "timeout"
    assert "timed out after 0.2s" in (result.error or "") and "returned" in (result.error or "")


def test_terminate_tells_the_function_to_stop_and_history_says_why() -> None:
    started = threading.Event()

    def waits(f: Fire) -> None:
        started.set()
        f.cancelled.wait(10)

    result, the_fire = run(waits, stop="session lost")
    assert the_fire.cancelled.is_set() and result.status == "terminated"
    assert (result.error or "").startswith("session lost")


def test_a_coroutine_runs_on_the_loop_and_its_task_is_cancelled_on_timeout() -> None:
    reached: list[str] = []

    async def sleepy(f: Fire) -> None:
        reached.append("began")
        await asyncio.sleep(30)
        reached.append("never")

    result, the_fire = run(sleepy, timeout=0.2)
    assert reached == ["began"] and the_fire.cancelled.is_set()
    assert result.status == "timeout" and "was cancelled" in (result.error or "")


def test_a_coroutine_that_finishes_is_ok() -> None:
    async def quick(f: Fire) -> None:
        await asyncio.sleep(0)

    result, _ = run(quick)
    assert result.status == "ok"


def test_a_job_not_registered_here_never_starts() -> None:
    runner = FunctionRunner({}, workers=1)
    done = threading.Event()
    results: list[RunResult] = []
    runner.start(fire("other"), None, lambda r: (results.append(r), done.set()))
    assert done.wait(5)
    assert results[0].status == "error" and "not registered" in (results[0].error or "")


@pytest.mark.parametrize("stop_first", [True, False])
def test_stopping_twice_or_after_the_end_changes_nothing(stop_first: bool) -> None:
    runner = FunctionRunner({"job": lambda f: None}, workers=1)
    done = threading.Event()
    results: list[RunResult] = []
    handle = runner.start(fire(), None, lambda r: (results.append(r), done.set()))
    assert done.wait(5)
    handle.terminate("late")
    handle.terminate("later")
    assert [r.status for r in results] == ["ok"]


def test_timeouts_take_no_thread_per_run() -> None:
    runner = FunctionRunner({"job": lambda fire: None}, workers=4)
    finished = threading.Semaphore(0)
    before = threading.active_count()
    for _ in range(200):
        runner.start(fire(), 60.0, lambda result: finished.release())
    for _ in range(200):
        assert finished.acquire(timeout=10)
    # the pool's workers and one deadline thread, not a timer per run
    assert threading.active_count() <= before + 4 + 1
    assert runner._timeouts.pending() == 0  # each run's timeout went with its end
    runner.close()
