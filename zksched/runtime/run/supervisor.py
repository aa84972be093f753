"""The thread that watches every run of one runner (`_Supervisor`).

One supervisor thread (``zksched-runs``) polls each run's pipes and pidfd and a wake-up
pipe, and keeps each run's next deadline, so a timeout holds even if nobody is blocked in
wait(); it advances a run's state machine (`monitor.py`) when one of its descriptors is
ready, a deadline of its passes, or it is terminated. One thread for all runs (instead of
one each) keeps a burst of hundreds of starts cheap. Completions (`on_done` callbacks,
which may write to ZooKeeper) run on a second thread (``zksched-done``), so that a slow
callback never delays the reading of output or a kill.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import os
import queue
import select
import threading
import time
from collections.abc import Iterator

from zksched.runtime.run.monitor import _Monitor

# One logger for all of running a command, whichever module logs (its name is in each line).
log = logging.getLogger("zksched.runtime.run.runner")


class _Supervisor:
    """The thread that watches every run of one runner (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._new: list[_Monitor] = []
        self._poked: set[_Monitor] = set()
        # a wake-up is on its way and the supervisor has not taken the new runs yet: one
        # wake-up serves every run added meanwhile (a burst adds hundreds at once)
        self._wake_pending = False
        self._thread: threading.Thread | None = None
        self._done: queue.SimpleQueue[_Monitor] = queue.SimpleQueue()
        self._done_thread: threading.Thread | None = None
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._poller = select.poll()
        self._owner: dict[int, _Monitor] = {}  # descriptor -> its run (supervisor thread only)

    def add(self, monitor: _Monitor) -> None:
        """Start watching a run. Raises when the threads cannot be started."""
        monitor.run_._poke = lambda: self.poke(monitor)
        with self._lock:
            if self._wake_w is None:
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_r, False)
                os.set_blocking(self._wake_w, False)
                self._poller.register(self._wake_r, select.POLLIN)
            if self._done_thread is None:
                done = threading.Thread(target=self._complete, name="zksched-done", daemon=True)
                done.start()
                self._done_thread = done
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="zksched-runs", daemon=True)
                thread.start()
                self._thread = thread
            self._new.append(monitor)
            wake, self._wake_pending = not self._wake_pending, True
        if wake:
            self._wake()

    def poke(self, monitor: _Monitor) -> None:
        """Look at this run now (it was asked to terminate)."""
        with self._lock:
            self._poked.add(monitor)
            wake, self._wake_pending = not self._wake_pending, True
        if wake:
            self._wake()

    def unregister(self, fd: int) -> None:
        """Stop polling a descriptor of a run (supervisor thread only)."""
        if self._owner.pop(fd, None) is not None:
            self._poller.unregister(fd)

    def _wake(self) -> None:
        if self._wake_w is not None:
            # BlockingIOError: the pipe is full of wake-ups already.
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"w")

    def _run(self) -> None:
        timers: list[tuple[float, int, _Monitor]] = []
        order = itertools.count()
        ready: set[_Monitor] = set()
        while True:
            try:
                ready = self._turn(timers, order, ready)
            except Exception:  # never die: every running command depends on this thread
                log.exception("the run supervisor failed; carrying on")
                time.sleep(0.1)

    def _turn(
        self,
        timers: list[tuple[float, int, _Monitor]],
        order: Iterator[int],
        ready: set[_Monitor],
    ) -> set[_Monitor]:
        """One round: take new runs in, advance the ones that are due, wait for events;
        returns the runs to advance next round."""
        with self._lock:
            new, self._new = self._new, []
            ready |= self._poked
            self._poked = set()
            self._wake_pending = False
        for monitor in new:
            try:
                for fd in monitor.fds():
                    self._owner[fd] = monitor
                    self._poller.register(fd, select.POLLIN)
            except Exception as exc:  # a descriptor it cannot poll: ends as "error"
                monitor.error = exc
            ready.add(monitor)
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            at, _, due = heapq.heappop(timers)
            if due.timer == at:
                due.timer = None
            ready.add(due)
        for monitor in ready:
            if monitor.over:
                continue
            if monitor.error is not None:
                monitor.over = True
                finished, wake_at = True, None
            else:
                finished, wake_at = monitor.advance(now)
            if finished:
                for fd in monitor.fds():
                    self.unregister(fd)
                monitor.run_._ended()
                self._done.put(monitor)
            elif wake_at is not None and wake_at != monitor.timer:
                monitor.timer = wake_at
                heapq.heappush(timers, (wake_at, next(order), monitor))
        if len(timers) > 2 * len(self._owner) + 256:
            # wake-ups of runs that are over (a timeout hours away, say): drop them
            timers[:] = [t for t in timers if not t[2].over]
            heapq.heapify(timers)
        ready = set()
        wait_ms = None
        if timers:
            wait_ms = max(0, math.ceil((timers[0][0] - time.monotonic()) * 1000))
        for fd, _events in self._poller.poll(wait_ms):
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(fd, 4096)
                continue
            monitor_ = self._owner.get(fd)
            if monitor_ is not None:
                monitor_.readable(fd)
                ready.add(monitor_)
        return ready

    def _complete(self) -> None:
        while True:
            monitor = self._done.get()
            try:
                monitor.complete()
            except Exception:  # never die: later runs' results depend on this thread
                log.exception("completing job %s failed", monitor.request.job)
