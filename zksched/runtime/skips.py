"""Skips: every fire that was due but not run is counted by reason and logged, without
flooding (the first of each (job, reason) at once, then at most one summary a minute)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from zksched.core.firerecord import SKIP_REASONS

log = logging.getLogger("zksched.skips")

SkipListener = Callable[[str, str, int], None]  # job, reason, count


class SkipLog:
    def __init__(self, quiet_period: float = 60.0) -> None:
        self.counts: Counter[str] = Counter()
        self.by_job: Counter[tuple[str, str]] = Counter()
        self._quiet = quiet_period
        self._last_logged: dict[tuple[str, str], float] = {}
        self._suppressed: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self.listeners: list[SkipListener] = []

    def skip(self, job: str, reason: str, detail: str = "", count: int = 1) -> None:
        if reason not in SKIP_REASONS and reason != "command-not-allowed":
            raise ValueError(f"unknown skip reason {reason!r}")
        key = (job, reason)
        now = time.monotonic()
        with self._lock:
            self.counts[reason] += count
            self.by_job[key] += count
            last = self._last_logged.get(key)
            if last is not None and now - last < self._quiet:
                self._suppressed[key] += count
                emit = False
                suppressed = 0
            else:
                self._last_logged[key] = now
                suppressed = self._suppressed.pop(key, 0)
                emit = True
        if emit:
            more = f" (and {suppressed} more since the last report)" if suppressed else ""
            log.info(
                "skipped %s: %s%s%s",
                job,
                reason,
                f" ({detail})" if detail else "",
                more,
                extra={
                    "event": "skip",
                    "job": job,
                    "reason": reason,
                    "count": count,
                    "detail": detail,
                },
            )
        for listener in self.listeners:
            listener(job, reason, count)
