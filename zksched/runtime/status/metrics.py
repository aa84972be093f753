"""The daemon's Prometheus metrics, on a registry of its own.

A per-daemon `CollectorRegistry` (not prometheus-client's global one) so that several
daemons in one process (in-process tests) never collide. Counters and histograms are fed by
the fire path's observers, the skip log's listeners and the scheduler's catch-up observers;
gauges are read at scrape time from what the daemon already knows (never from ZooKeeper).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Fire delay: a fire normally starts within milliseconds of its instant; seconds mean a
# backlog, minutes a catch-up.
DELAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)


class DaemonMetrics:
    """Every metric one daemon exports, named `zksched_*`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        owned_jobs: Callable[[], float],
        members: Callable[[], float],
        session_connected: Callable[[], float],
        clock_offset: Callable[[], float | None],
    ) -> None:
        # No `*_created` series: they doubled every per-job counter (Prometheus's
        # cardinality, and the scrape's render time: 26 -> 13 ms at 2,000 jobs), and
        # Prometheus's text format does not need them. (A process-wide setting.)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.fires = Counter(
            "zksched_fires",
            "Fires run by this member, by job and outcome (ok, failed, timeout, ...).",
            ["job", "outcome"],
            registry=r,
        )
        self.retries = Counter(
            "zksched_fire_retries",
            "Runs that were a retry of a failed run of the same fire (retries = N), by job.",
            ["job"],
            registry=r,
        )
        self.skips = Counter(
            "zksched_skips", "Due fires not run, by reason.", ["reason"], registry=r
        )
        self.job_skips = Counter(
            "zksched_job_skips",
            "Due fires not run, by job and reason.",
            ["job", "reason"],
            registry=r,
        )
        self.fire_delay = Histogram(
            "zksched_fire_delay_seconds",
            "From a fire's due time (instant + jitter) to its command's start.",
            buckets=DELAY_BUCKETS,
            registry=r,
        )
        self.run_duration = Histogram(
            "zksched_run_duration_seconds",
            "How long job commands ran.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.catchups = Counter(
            "zksched_catchups",
            "Catch-ups started after taking a job over (each may run several instants).",
            registry=r,
        )
        self.catchup_instants = Counter(
            "zksched_catchup_instants", "Missed instants planned to run by catch-ups.", registry=r
        )
        gauges: Mapping[str, tuple[str, Callable[[], float]]] = {
            "zksched_owned_jobs": ("Jobs this member owns now.", owned_jobs),
            "zksched_members": ("Live members in this member's owner table.", members),
            "zksched_session_connected": (
                "1 while connected to ZooKeeper, else 0.",
                session_connected,
            ),
            "zksched_clock_offset_seconds": (
                "This host's clock minus ZooKeeper's (NaN while unknown).",
                lambda: _nan_if_none(clock_offset()),
            ),
        }
        for name, (help_text, read) in gauges.items():
            Gauge(name, help_text, registry=r).set_function(read)

    # -- feeds (called on fire worker threads; prometheus-client's metrics are thread-safe) --

    def on_fire(self, event: Mapping[str, object]) -> None:
        # The histograms first: a render between two of these lines may show a fire in
        # them before it shows in zksched_fires_total, never the other way round.
        delay_ms = event.get("delay_ms")
        if isinstance(delay_ms, int | float):
            # A negative delay (a trigger's due time is its own start) counts as zero.
            self.fire_delay.observe(max(0.0, delay_ms / 1000))
        started, finished = event.get("started_ts"), event.get("finished_ts")
        if isinstance(started, int | float) and isinstance(finished, int | float):
            self.run_duration.observe(max(0.0, finished - started))
        job = str(event.get("job", ""))
        attempt = event.get("attempt")
        if isinstance(attempt, int) and attempt > 1:
            self.retries.labels(job=job).inc()
        self.fires.labels(job=job, outcome=str(event.get("status", "unknown"))).inc()

    def on_skip(self, job: str, reason: str, count: int) -> None:
        self.job_skips.labels(job=job, reason=reason).inc(count)  # per job first, as above
        self.skips.labels(reason=reason).inc(count)

    def on_catchup(self, job: str, instants: int) -> None:
        del job  # counted cluster-wide per member; the job is in the log
        self.catchups.inc()
        self.catchup_instants.inc(instants)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value
