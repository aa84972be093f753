"""The handle of one run (`RunningCommand`), as `CommandRunner.start()` returns it.

A caller waits for its result, terminates the run, or is called back with the result
(`on_done`); each is safe from any thread. The result is set once (`_finish`): for a run
that started, by its monitor (`monitor.py`) on the supervisor's completion thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from zksched.runtime.run.request import RunRequest, RunResult

# One logger for all of running a command, whichever module logs (its name is in each line).
log = logging.getLogger("zksched.runtime.run.runner")


class RunningCommand:
    """One started (or failed-to-start) run. Create it with `CommandRunner.start()`."""

    pid: int | None
    started_at: float

    def __init__(self, request: RunRequest, started_at: float) -> None:
        self.request = request
        self.pid = None
        self.started_at = started_at
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._result: RunResult | None = None
        self._terminate_reason: str | None = None
        # guarded by _lock: tells the supervisor to look at this run; None once it ended
        self._poke: Callable[[], None] | None = None
        self._callbacks: list[Callable[[RunResult], None]] = []  # guarded by _lock
        self._on_exit: Callable[[], None] | None = None  # called once (guarded by _lock)

    @classmethod
    def _failed(
        cls,
        request: RunRequest,
        started_at: float,
        message: str,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> RunningCommand:
        run = cls(request, started_at)
        run._on_exit = on_exit
        log.warning(
            "job %s could not start: %s",
            request.job,
            message,
            extra={"event": "job-start-error", "job": request.job, "fire_key": request.fire_key},
        )
        run._finish(RunResult("error", None, started_at, started_at, error=message))
        if on_done is not None:
            # like a run's monitor would: on another thread than the caller's
            try:
                threading.Thread(target=run.on_done, args=(on_done,), daemon=True).start()
            except RuntimeError:  # no thread to be had: the caller's then
                run.on_done(on_done)
        return run

    @classmethod
    def _spawned(
        cls,
        request: RunRequest,
        pid: int,
        started_at: float,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> RunningCommand:
        """The handle of a command that started as `pid`; the runner has it watched."""
        run = cls(request, started_at)
        run._on_exit = on_exit
        run.pid = pid
        if on_done is not None:
            run._callbacks.append(on_done)
        return run

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the run is over (the command exited, or timed out and was killed).

        With a timeout (e.g. for a bounded shutdown), raise TimeoutError if it is not over
        by then; the run carries on."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"job {self.request.job} still running after {timeout}s")
        assert self._result is not None
        return self._result

    def terminate(self, reason: str) -> None:
        """Kill the command's process group (SIGTERM, then SIGKILL after kill_grace); wait()
        then reports "terminated" with error=reason. Safe from any thread, any number of
        times; a no-op once the command has exited (its own status stands)."""
        with self._lock:
            if self._terminate_reason is not None or self._poke is None:
                return
            self._terminate_reason = reason
            poke = self._poke
        poke()

    # -- used by the runner and the monitor -----------------------------------------------

    def _pending_terminate(self) -> str | None:
        with self._lock:
            return self._terminate_reason

    def _close_wake(self) -> None:
        with self._lock:
            self._poke = None

    def on_done(self, callback: Callable[[RunResult], None]) -> None:
        """Call `callback(result)` once the run is over: from the run's monitor thread, or at
        once if it is over already. Lets a caller hand a run off instead of blocking on it."""
        with self._lock:
            if self._result is None:
                self._callbacks.append(callback)
                return
            result = self._result
        callback(result)

    def _ended(self) -> None:
        """The run is over (its result may still be in the making): call on_exit, once."""
        with self._lock:
            on_exit, self._on_exit = self._on_exit, None
        if on_exit is not None:
            try:
                on_exit()
            except Exception:
                log.exception("on_exit of job %s failed", self.request.job)

    def _finish(self, result: RunResult) -> None:
        self._ended()
        with self._lock:
            self._result = result
            callbacks, self._callbacks = self._callbacks, []
        self._done.set()
        for callback in callbacks:
            try:
                callback(result)
            except Exception:
                log.exception("completion of job %s failed", self.request.job)
