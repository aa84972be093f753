"""Health, readiness, metrics and the status page of one daemon (`DaemonStatus`).

All of it is read from what the daemon already holds in memory (the cluster view, the job
table snapshot, the scheduler's owned set, the recent fires and skips in `activity.py`);
nothing here calls ZooKeeper, so a slow or cut-off ZooKeeper cannot make a probe hang.
The status page and `/metrics` are rendered once and shared (`rendered.py`): a
request is served a body rendered at most a second or so before, never waits for a
render while the daemon is busy. Each new render is published to the HTTP child process
(`child_server.py`), which serves it without asking the daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from zksched._version import __version__
from zksched.runtime.status.activity import ActivityLog
from zksched.runtime.status.child_server import PUBLISHED_PATHS, PublishedBodies
from zksched.runtime.status.metrics import DaemonMetrics
from zksched.runtime.status.page import (
    StatusSnapshot,
    job_rows,
    member_rows,
    render_status_page,
)
from zksched.runtime.status.rendered import SharedRender
from zksched.runtime.status.source import StatusSource

PAGE_MAX_AGE = 1.0  # seconds a rendered status page is served again (it refreshes every 5)
# Up to this old, a page past PAGE_MAX_AGE is still served while a new one is rendered on
# the side: a viewer never waits for a render that thousands of jobs make slow.
PAGE_STALE_MAX = 5.0
PAGE_TYPE = "text/html; charset=utf-8"
# /metrics: figures at most about a second old while scraped, re-rendered every second
# for 5 minutes after the last scrape (longer than any usual scrape interval), with at most
# 2 % of a core (a 2,000-job exposition costs ~13 ms).
METRICS_MAX_AGE = 1.0
METRICS_STALE_MAX = 5.0
METRICS_KEEP_WARM = 300.0
METRICS_CPU_SHARE = 0.02


@dataclass(frozen=True)
class Probe:
    ok: bool
    reason: str


class DaemonStatus:
    """Health, readiness, metrics and the status snapshot of one daemon, from memory only."""

    def __init__(self, source: StatusSource) -> None:
        self._source = source
        self.activity = ActivityLog(source.now)
        self.metrics = DaemonMetrics(
            owned_jobs=source.owned_count,
            members=lambda: len(source.view.table),
            session_connected=lambda: 1.0 if source.view.connected else 0.0,
            clock_offset=source.clock_offset,
        )
        source.observe(self._on_fire, self._on_skip, self.metrics.on_catchup)
        # The page reloads itself every few seconds while someone looks at it, which keeps
        # it warm; a scraper comes every 15-60 s, so /metrics is kept warm in between.
        self._page = SharedRender(
            "status page", self._render_page, max_age=PAGE_MAX_AGE, stale_max=PAGE_STALE_MAX
        )
        self._metrics = SharedRender(
            "metrics",
            self.metrics.exposition,
            max_age=METRICS_MAX_AGE,
            stale_max=METRICS_STALE_MAX,
            keep_warm=METRICS_KEEP_WARM,
            cpu_share=METRICS_CPU_SHARE,
        )
        # what the HTTP child serves from published copies: name -> (body, content type)
        self._published = {
            PUBLISHED_PATHS["/"]: (self._page, PAGE_TYPE),
            PUBLISHED_PATHS["/metrics"]: (self._metrics, self.metrics.content_type),
        }
        # A loop that has not beaten for this long is stuck: every loop wakes at least once a
        # second, and its ZooKeeper calls are bounded by fractions of the session timeout.
        self.stale_after = max(10.0, 3 * source.session_timeout)

    def _on_fire(self, event: Mapping[str, object]) -> None:
        self.metrics.on_fire(event)
        self.activity.on_fire(event)

    def _on_skip(self, job: str, reason: str, count: int) -> None:
        self.metrics.on_skip(job, reason, count)
        self.activity.on_skip(job, reason, count)

    def health(self) -> Probe:
        d = self._source
        if d.stopping:
            return Probe(False, "stopping")
        ages = d.heartbeats()
        stale = [
            f"{name} last beat {age:.0f}s ago" if age < 86_400 else f"{name} never ran"
            for name, age in ages.items()
            if age > self.stale_after
        ]
        if stale:
            return Probe(False, "; ".join(stale))
        return Probe(True, "ok")

    def readiness(self) -> Probe:
        d = self._source
        view = d.view
        if d.stopping:
            return Probe(False, "stopping")
        if not view.connected:
            return Probe(False, "not connected to ZooKeeper")
        if not view.active:
            return Probe(False, "not in the member table yet")
        if d.job_table().generation < 0:
            return Probe(False, "job table not read yet")
        return Probe(True, "ok")

    def page(self) -> bytes:
        """The rendered status page (shared; see `SharedRender`)."""
        return self._page.get()

    def metrics_body(self) -> bytes:
        """The Prometheus exposition (shared and kept warm; see `SharedRender`)."""
        return self._metrics.get()

    def close(self) -> None:
        """No more keeping warm or publishing (after a render under way)."""
        self._page.close()
        self._metrics.close()

    def publish_to(self, bodies: PublishedBodies) -> None:
        """Hand every new page and exposition to the HTTP child process, which serves them
        for as long as they may be served here (`child_server.py`)."""
        for name, (shared, ctype) in self._published.items():
            shared.on_rendered = partial(_publish, bodies, name, ctype, shared.stale_max)

    def asked(self, name: str) -> None:
        """The child served a published copy (`PUBLISHED_PATHS` name): as if asked here."""
        published = self._published.get(name)
        if published is not None:
            published[0].touch()

    def _render_page(self) -> bytes:
        return render_status_page(self.snapshot()).encode()

    def snapshot(self) -> StatusSnapshot:
        d = self._source
        view = d.view
        table = view.table
        snapshot = d.job_table()
        entries = snapshot.entries
        now = d.now()
        now_dt = d.now_dt()
        last = self.activity.last_results()
        if len(last) > len(entries):
            self.activity.forget_jobs_except(set(entries))
        jobs = job_rows(entries, table, now_dt, last)
        offset = d.clock_offset()
        offsets = {} if offset is None else {d.member_id: offset}
        members = member_rows(table, jobs, view.member_id, offsets)
        fires, skips = self.activity.recent()
        ready, health = self.readiness(), self.health()
        return StatusSnapshot(
            client_id=d.client_id,
            member_id=view.member_id,
            version=__version__,
            generated_at=now,
            connected=view.connected,
            ready_problem=None if ready.ok else ready.reason,
            health_problem=None if health.ok else health.reason,
            table_generation=snapshot.generation,
            members=members,
            jobs=jobs,
            skips=skips,
            fires=fires,
            skip_totals=self.activity.skip_totals(),
        )


def _publish(
    bodies: PublishedBodies, name: str, ctype: str, stale_max: float, body: bytes, at: float
) -> None:
    """A new body for the child, to be served until `stale_max` after its render began."""
    bodies.write(name, ctype, body, at + stale_max)
