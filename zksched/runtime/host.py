"""Where the fire shell's work runs: `Host`, what it needs (pools, a queue, a worker loop, a
clock), and `ThreadHost`, the daemon's (threads and the wall clock).

The shell (zksched/runtime/fire) never makes a thread or reads the time itself: it asks its
host. The daemon's host is threads; the cluster simulator (`sim/`) gives its own, which runs
the same shell in virtual time, one event after another, on one thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from zksched.runtime.clock import Clock

T = TypeVar("T")

Step = Callable[[], float | None]  # a worker's step: seconds until the next (None: until woken)


class Executor(Protocol):
    """Runs submitted calls (a thread pool's `submit`; RuntimeError once shut down)."""

    def submit(self, fn: Callable[..., object], /, *args: Any) -> object: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


class Inbox(Protocol[T]):
    """The engine's queue of inputs (`queue.SimpleQueue`'s methods)."""

    def put(self, item: T) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> T: ...

    def get_nowait(self) -> T: ...


class Host(Protocol):
    @property
    def clock(self) -> Clock: ...

    def pool(self, name: str, threads: int) -> Executor:
        """Where ZooKeeper work runs: each call may wait for several round trips."""
        ...

    def starters(self, name: str, threads: int) -> Executor:
        """Where commands are started (a start waits for the kernel)."""
        ...

    def inbox(self) -> Inbox[Any]: ...

    def worker(self, name: str, step: Step) -> Callable[[], None]:
        """A loop that calls `step` again after the wait it returns, or once woken when it
        returns None; returns the function that wakes it."""
        ...


class ThreadHost:
    """The daemon's host: thread pools, `queue.SimpleQueue`, one thread per worker."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    @property
    def clock(self) -> Clock:
        return self._clock

    def pool(self, name: str, threads: int) -> Executor:
        return ThreadPoolExecutor(threads, thread_name_prefix=name)

    def starters(self, name: str, threads: int) -> Executor:
        return ThreadPoolExecutor(threads, thread_name_prefix=name)

    def inbox(self) -> Inbox[Any]:
        return queue.SimpleQueue()

    def worker(self, name: str, step: Step) -> Callable[[], None]:
        return _Worker(name, step).wake


class _Worker:
    """A daemon thread, started at the first wake, that runs a `Step` loop."""

    def __init__(self, name: str, step: Step) -> None:
        self._name = name
        self._step = step
        self._cv = threading.Condition()
        self._woken = False
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        with self._cv:
            self._woken = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._woken)
                self._woken = False
            while (pause := self._step()) is not None:
                if pause > 0:
                    time.sleep(pause)
