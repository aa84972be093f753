"""Running function jobs: the Python functions an app registered (`zksched.Cluster`).

A function fire is one more way to start a run, nothing else: the fire core claims and
decides exactly as for a command, and `RunActions` hands the start here instead of to the
`CommandRunner`. What differs is only how a run starts and stops:

- A plain function runs on a thread of a pool sized like `--concurrency` (the fire path never
  starts more runs at once than that, so a start never queues inside the pool); an
  `async def` function runs as a task on one event loop thread of the runner's own.
- Python threads cannot be killed. Stopping a run (its timeout, the session may be lost, a
  stop) sets `fire.cancelled`, and cancels the task of a coroutine; the run is over only
  when the function returns, so `overlap = "skip"` still never has two runs at once. A run
  told to stop ends `timeout` or `terminated` (its history says why and how it ended),
  whatever the function returned: the work it was asked to stop may be half done.
- An exception is `failed`, with its type and message; `error` is for a run that never
  started (no such function registered here).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from zksched.runtime.run.deadlines import Deadlines
from zksched.runtime.run.request import RunResult, RunStatus

log = logging.getLogger("zksched.runtime.run.functions")

JobFunction = Callable[["Fire"], Any]  # a plain function, or an async def one


@dataclass(frozen=True)
class Fire:
    """What a function job is called with: one instant of the job, claimed for this call."""

    job: str
    key: str  # the fire key, `job@UTC-instant`: the same on every attempt (idempotency key)
    scheduled: datetime  # the instant (UTC)
    fencing_token: int  # grows with every claim of the job across the cluster
    member_id: str
    attempt: int = 1  # > 1: a retry, or at-least-once's run of an orphaned claim
    # set when the function should stop: its timeout passed, the session may be lost, the
    # member is stopping (for a coroutine, its task is cancelled as well)
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)


class FunctionRun:
    """The handle of one function run (what `FunctionRunner.start` returns)."""

    def __init__(self, fire: Fire, started_at: float) -> None:
        self.fire = fire
        self.started_at = started_at
        self._lock = threading.Lock()
        self._stop_status: RunStatus | None = None
        self._stop_reason = ""
        self._cancel_task: Callable[[], object] | None = None
        self._done = threading.Event()
        self.result: RunResult | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        if not self._done.wait(timeout):
            raise TimeoutError(f"function job {self.fire.job} still running after {timeout}s")
        assert self.result is not None
        return self.result

    def terminate(self, reason: str) -> None:
        """Ask the function to stop (see the module docstring). Any thread, any times."""
        self._stop("terminated", reason)

    def _stop(self, status: RunStatus, reason: str) -> None:
        with self._lock:
            if self._stop_status is not None or self._done.is_set():
                return
            self._stop_status, self._stop_reason = status, reason
            cancel_task = self._cancel_task
        self.fire.cancelled.set()
        if cancel_task is not None:
            cancel_task()

    def _set_task(self, cancel: Callable[[], object]) -> None:
        with self._lock:
            self._cancel_task = cancel
            stopped = self._stop_status is not None
        if stopped:  # asked to stop before the task existed
            cancel()

    def _outcome(self, error: BaseException | None) -> RunResult:
        finished = time.time()
        with self._lock:
            status, reason = self._stop_status, self._stop_reason
        if status is not None:
            how = "returned" if error is None else _describe(error)
            message = f"{reason}; the function was told to stop (fire.cancelled) and {how}"
            return RunResult(status, None, self.started_at, finished, error=message)
        if error is None:
            return RunResult("ok", 0, self.started_at, finished)
        return RunResult("failed", None, self.started_at, finished, error=_describe(error))


def _describe(error: BaseException) -> str:
    if isinstance(error, asyncio.CancelledError):
        return "was cancelled"
    text = str(error).replace("\n", " ")[:500]
    return f"raised {type(error).__name__}: {text}" if text else f"raised {type(error).__name__}"


class FunctionRunner:
    """Starts the registered functions of one app member; `close()` when done with it."""

    def __init__(self, functions: Mapping[str, JobFunction], workers: int) -> None:
        self._functions = dict(functions)
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="zksched-fn")
        self._timeouts = Deadlines("zksched-fn-timeouts")  # one thread for every run's
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()

    def registered(self, job: str) -> bool:
        return job in self._functions

    def start(
        self, fire: Fire, timeout: float | None, on_done: Callable[[RunResult], None]
    ) -> FunctionRun:
        """Start the job's function; `on_done(result)` is called once, on another thread.
        Never raises: a function not registered here is a run with status `error`."""
        run = FunctionRun(fire, time.time())
        function = self._functions.get(fire.job)
        if function is None:
            now = time.time()
            error = f"function job {fire.job} is not registered in this process"
            run.result = RunResult("error", None, now, now, error=error)
            run._done.set()
            threading.Thread(target=on_done, args=(run.result,), daemon=True).start()
            return run
        deadline = None
        if timeout is not None:
            why = f"timed out after {timeout:g}s"
            deadline = self._timeouts.add(timeout, lambda: run._stop("timeout", why))

        def finish(error: BaseException | None) -> None:
            if deadline is not None:
                self._timeouts.cancel(deadline)
            run.result = run._outcome(error)
            run._done.set()
            try:
                on_done(run.result)
            except Exception:
                log.exception("recording function job %s failed", fire.job)

        if inspect.iscoroutinefunction(function):
            self._start_coroutine(function, run, finish)
        else:
            self._pool.submit(_call, function, fire, finish)
        return run

    def _start_coroutine(
        self,
        function: Callable[[Fire], Awaitable[Any]],
        run: FunctionRun,
        finish: Callable[[BaseException | None], None],
    ) -> None:
        loop = self._event_loop()

        async def call() -> None:
            error: BaseException | None = None
            try:
                await function(run.fire)
            except asyncio.CancelledError as exc:
                error = exc  # cancelled by us (timeout, terminate): recorded, not re-raised
            except BaseException as exc:
                error = exc
            finish(error)

        def spawn() -> None:
            task = loop.create_task(call())
            run._set_task(lambda: loop.call_soon_threadsafe(task.cancel))

        loop.call_soon_threadsafe(spawn)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="zksched-fn-async", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Stop taking runs; those under way go on (a stop waits for them elsewhere), with
        no timeout from now on (the member is stopping: it has told them to stop)."""
        self._pool.shutdown(wait=False)
        self._timeouts.close()
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)


def _call(
    function: JobFunction, fire: Fire, finish: Callable[[BaseException | None], None]
) -> None:
    error: BaseException | None = None
    try:
        result = function(fire)
        if inspect.isawaitable(result):
            # an async function behind a plain callable (an object with an async __call__, a
            # wrapper without functools.wraps): never awaited here, so it did not run
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError(
                f"function job {fire.job} returned an awaitable that nothing awaits (it did "
                "not run): register the async def function itself, or mark the wrapper with "
                "functools.wraps"
            )
    except BaseException as exc:  # SystemExit too: the run must end, whatever it raised
        error = exc
    finish(error)


__all__ = ["Fire", "FunctionRun", "FunctionRunner", "JobFunction"]
