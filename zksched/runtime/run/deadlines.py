"""Deadlines: one thread that calls each action at its time, unless it was cancelled first.

For function runs' timeouts (functions.py): a `threading.Timer` per run is a thread started
and torn down for every run, which at thousands of short runs a second costs more than the
runs. Here every pending deadline is an entry in one heap. A cancelled entry stays in the
heap until its time or until cancelled entries outnumber live ones (then the heap is
rebuilt), so memory follows the runs in flight, not the runs ever started.

Actions run on the deadline thread, one after the other: they must be short (set a flag,
cancel a task) and must not block.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

COMPACT_ABOVE = 64  # heap entries before cancelled ones are worth sweeping out


class Deadlines:
    def __init__(self, name: str = "zksched-deadlines") -> None:
        self._name = name
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int]] = []  # (monotonic due time, key)
        self._live: dict[int, Callable[[], object]] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, delay: float, action: Callable[[], object]) -> int:
        """Call `action` in `delay` seconds; returns the key that cancels it. Raises
        RuntimeError once closed."""
        key = next(self._keys)
        with self._cv:
            if self._closed:
                raise RuntimeError("deadlines closed")
            self._live[key] = action
            heapq.heappush(self._heap, (time.monotonic() + delay, key))
            if len(self._heap) > COMPACT_ABOVE and len(self._heap) > 2 * len(self._live):
                self._heap = [entry for entry in self._heap if entry[1] in self._live]
                heapq.heapify(self._heap)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()
        return key

    def cancel(self, key: int) -> None:
        """The action will not be called (if it is being called right now, it still is)."""
        with self._cv:
            self._live.pop(key, None)

    def pending(self) -> int:
        with self._cv:
            return len(self._live)

    def close(self) -> None:
        """Call nothing more; the thread ends."""
        with self._cv:
            self._closed = True
            self._live.clear()
            self._heap.clear()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                action = self._next_due()
                if action is None:
                    return
            try:
                action()
            except Exception:
                log.exception("a deadline's action failed")

    def _next_due(self) -> Callable[[], object] | None:
        """Wait (holding the condition) for the next live deadline; None once closed."""
        while not self._closed:
            while self._heap and self._heap[0][1] not in self._live:
                heapq.heappop(self._heap)  # cancelled
            if not self._heap:
                self._cv.wait()
                continue
            due, key = self._heap[0]
            wait = due - time.monotonic()
            if wait > 0:
                self._cv.wait(wait)
                continue
            heapq.heappop(self._heap)
            return self._live.pop(key)
        return None
