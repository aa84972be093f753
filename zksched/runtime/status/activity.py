"""What this member did recently, for the status page (`ActivityLog`): the last results
of each job and the recent fires and skips, bounded.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping

from zksched.runtime.status.page import FireResult, SkipRow

RESULTS_PER_JOB = 3
RECENT_FIRES = 50
RECENT_SKIPS = 100


class ActivityLog:
    """What this member did recently, bounded: last results per job, recent fires and skips."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._skip_totals: Counter[str] = Counter()
        self._by_job: dict[str, deque[FireResult]] = {}
        self._fires: deque[FireResult] = deque(maxlen=RECENT_FIRES)
        self._skips: deque[SkipRow] = deque(maxlen=RECENT_SKIPS)

    def on_fire(self, event: Mapping[str, object]) -> None:
        result = _fire_result(event)
        with self._lock:
            self._fires.appendleft(result)
            per_job = self._by_job.get(result.job)
            if per_job is None:
                per_job = self._by_job[result.job] = deque(maxlen=RESULTS_PER_JOB)
            per_job.appendleft(result)

    def on_skip(self, job: str, reason: str, count: int) -> None:
        with self._lock:
            self._skips.appendleft(SkipRow(self._now(), job, reason, count))
            self._skip_totals[reason] += count

    def skip_totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._skip_totals)

    def last_results(self) -> dict[str, tuple[FireResult, ...]]:
        with self._lock:
            return {job: tuple(results) for job, results in self._by_job.items()}

    def recent(self) -> tuple[tuple[FireResult, ...], tuple[SkipRow, ...]]:
        with self._lock:
            return tuple(self._fires), tuple(self._skips)

    def forget_jobs_except(self, names: set[str]) -> None:
        """Drop deleted jobs' results, so the per-job map stays bounded by the job table."""
        with self._lock:
            for job in [j for j in self._by_job if j not in names]:
                del self._by_job[job]


def _fire_result(event: Mapping[str, object]) -> FireResult:
    def number(key: str) -> float:
        value = event.get(key)
        return float(value) if isinstance(value, int | float) else 0.0

    exit_code, token = event.get("exit_code"), event.get("fencing_token")
    return FireResult(
        job=str(event.get("job", "")),
        fire_key=str(event.get("fire_key", "")),
        kind=str(event.get("kind", "")),
        status=str(event.get("status", "")),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        started_ts=number("started_ts"),
        duration_s=max(0.0, number("finished_ts") - number("started_ts")),
        delay_ms=number("delay_ms"),
        fencing_token=token if isinstance(token, int) else None,
    )
