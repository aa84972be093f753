"""When the daemon's full garbage collections happen: at quiet moments, not in a burst.

CPython's cyclic collector runs a full (generation 2) pass on its own whenever enough
objects have survived younger passes. A full pass walks every tracked object and holds
every thread meanwhile: with thousands of jobs that was 15-110 ms, and in a burst of fires
it came exactly when most objects were being made, stalling the fires and the HTTP probes
(docs/benchmarks.md, http). So the daemon turns automatic full passes off (young passes
stay automatic and cheap) and runs them itself:

- when the member is quiet (no fire running or being recorded, none due within
  `QUIET_AHEAD` seconds, or three times the last pass's pause if that is longer: with many
  jobs a pass takes longer, and must still end before the next fire), at most every
  `MIN_INTERVAL` seconds, and no more often than keeps the passes' pauses under
  `PAUSE_SHARE` of the time (at 100,000 jobs a pass holds everything for ~0.3 s);
- regardless, once `MAX_INTERVAL` seconds have passed, so a member that is never quiet
  still frees its garbage cycles.

A pass at a quiet moment unfreezes, collects and freezes again: whatever survives it is
moved out of the collector's sight until the next one (`gc.freeze()`), so even young passes
stay short.

Apart from the passes, every `TRIM_INTERVAL` seconds, busy or not, the C library is asked to
give free heap back to the system (glibc's `malloc_trim`): a member that owned every job
while it was alone and then handed most of them over keeps that memory otherwise, and a
replaced job table or owner table leaves hundreds of MB of it at a million jobs (a quiet
pass there comes every minute or two at best, and never on a member with jobs every
second). A trim holds no interpreter thread (ctypes lets go of them), only the C library's
heap for its ~16 ms (~0.3 ms with nothing to give back).

A pass forced by time (the member is never quiet: e.g. a job fires every second) collects
what was made since the last freeze and leaves the frozen alone: at a million jobs walking
the frozen objects holds every thread for seconds, and the fires due meanwhile would be
late or skipped. Only garbage cycles among frozen objects wait for a quiet pass; so that
they cannot pile up on a member that is never quiet, a forced pass unfreezes too once the
frozen objects are `FROZEN_GROWTH` more than after the last pass that unfroze.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

MIN_INTERVAL = 10.0
MAX_INTERVAL = 300.0
QUIET_AHEAD = 1.0
PAUSE_SHARE = 0.01  # at most this share of the time in full passes (below MAX_INTERVAL)
FROZEN_GROWTH = 0.25  # a forced pass unfreezes once the frozen grew this share (see above)
TRIM_INTERVAL = MIN_INTERVAL  # seconds between two trims, at most (see above)
LONG_PAUSE = 0.5  # seconds: a pass this long is said in the log (a member's probes wait)
NO_AUTOMATIC_FULL_PASS = 1_000_000_000  # young passes before a full one: never, in practice


class GcSteward:
    def __init__(
        self,
        quiet: Callable[[float], bool],
        clock: Callable[[], float] = time.monotonic,
        check_every: float = 0.5,
    ) -> None:
        """`quiet(ahead)`: whether a pause now would delay nothing, nor anything due within
        `ahead` seconds (asked every `check_every`)."""
        self._quiet = quiet
        self._clock = clock
        self._check_every = check_every
        self._last = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: tuple[int, int, int] | None = None
        self.passes = 0
        # the last pass that unfroze: how long it held everything (seconds, what the next
        # quiet one will), and how many objects it left frozen
        self.last_pause = 0.0
        self._frozen = gc.get_freeze_count()
        self._trimmed = clock()  # when free heap was last given back

    def start(self) -> None:
        if self._thread is not None:
            return
        young, middle, _ = gc.get_threshold()
        self._saved = gc.get_threshold()
        gc.set_threshold(young, middle, NO_AUTOMATIC_FULL_PASS)
        self._thread = threading.Thread(target=self._run, name="zksched-gc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    def spacing(self) -> float:
        """The least time between two passes made at quiet moments: a pass that holds
        everything for long (many jobs) comes as seldom as keeps its pauses under
        PAUSE_SHARE of the time (an idle member's CPU is mostly these passes)."""
        return max(MIN_INTERVAL, self.last_pause / PAUSE_SHARE)

    def due(self, now: float, quiet: bool) -> bool:
        waited = now - self._last
        return waited >= MAX_INTERVAL or (quiet and waited >= self.spacing())

    def collect(self, unfreeze: bool = True) -> float:
        """One full pass now (the frozen objects are walked too if `unfreeze`); returns how
        long everything was held."""
        started = time.perf_counter()
        if unfreeze:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
        pause = time.perf_counter() - started
        if unfreeze:
            self._frozen, self.last_pause = gc.get_freeze_count(), pause
        self._last = self._clock()
        self.passes += 1
        log.log(
            logging.INFO if pause >= LONG_PAUSE else logging.DEBUG,
            "full garbage collection: held every thread for %.1f ms",
            pause * 1000,
            extra={"event": "gc", "pause_ms": round(pause * 1000, 1), "unfroze": unfreeze},
        )
        return pause

    def give_back(self) -> None:
        """Free heap back to the system (interpreter threads go on meanwhile: ctypes lets
        go of them). Without glibc, nothing to ask."""
        trim = _malloc_trim()
        if trim is not None:
            trim(0)  # keep no free memory at the heap's top either
        self._trimmed = self._clock()

    def frozen_grew(self) -> bool:
        """The frozen objects grew past `FROZEN_GROWTH` since the last pass that unfroze."""
        return gc.get_freeze_count() > self._frozen * (1 + FROZEN_GROWTH)

    def _run(self) -> None:
        was_quiet = False
        while not self._stop.wait(self._check_every):
            now = self._clock()
            try:
                ahead = max(QUIET_AHEAD, 3 * self.last_pause)
                # asked only when a pass could follow: the question looks at every job
                quiet = self._quiet(ahead) if now - self._last >= self.spacing() else False
            except Exception:  # a question that fails is "not quiet"
                quiet = False
            # quiet at two looks in a row: not a gap between two batches of a burst
            calm = quiet and was_quiet
            if self.due(now, calm):
                # forced by time: the frozen walked only when calm or grown (above)
                self.collect(unfreeze=calm or self.frozen_grew())
                quiet = False
            if now - self._trimmed >= TRIM_INTERVAL:
                self.give_back()
            was_quiet = quiet


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None (another C library); looked up at the first trim."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's among them
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim
