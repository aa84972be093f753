"""The daemon's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` and the status page `/`.

stdlib `HTTPServer` on a daemon thread, with a few handler threads started once. Handlers
only read what the daemon already holds in memory (the cluster view, the job table
snapshot, the scheduler's owned set, the recent fires and skips collected here); they never
call ZooKeeper, so a slow or cut-off ZooKeeper cannot make a probe hang. The status page
and `/metrics` are rendered once and shared (`sharedrender.py`): a request is served a body
rendered at most a second or so before, never waits for a render while the daemon is busy.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any

from zksched import __version__
from zksched.runtime.metrics import DaemonMetrics
from zksched.runtime.probes import (
    CONTENT_SECURITY_POLICY,
    PUBLISHED_PATHS,
    ProbeProcess,
    PublishedBodies,
)
from zksched.runtime.sharedrender import SharedRender
from zksched.runtime.statuspage import (
    FireResult,
    SkipRow,
    StatusSnapshot,
    job_rows,
    member_rows,
    render_status_page,
)

if TYPE_CHECKING:
    from zksched.runtime.daemon import Daemon

log = logging.getLogger(__name__)

DEFAULT_HTTP = "127.0.0.1:9464"  # loopback only unless asked; a port in the exporters' 9xxx range
RESULTS_PER_JOB = 3
RECENT_FIRES = 50
RECENT_SKIPS = 100
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


class HttpUnavailable(RuntimeError):
    """The endpoint cannot listen where it was asked to (in use, no permission, bad host)."""


def parse_http_address(text: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `:port` (every interface) -> (host, port); ValueError."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"--http {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"--http {text!r}: port {port} is out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", port


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


@dataclass(frozen=True)
class Probe:
    ok: bool
    reason: str


class DaemonStatus:
    """Health, readiness, metrics and the status snapshot of one daemon, from memory only."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon
        self.activity = ActivityLog(daemon.clock.now)
        self.metrics = DaemonMetrics(
            owned_jobs=lambda: len(daemon.engine.owned_jobs()),
            members=lambda: len(daemon.cluster.view.table),
            session_connected=lambda: 1.0 if daemon.cluster.view.connected else 0.0,
            clock_offset=lambda: clock_offsets(daemon).get(daemon.member.member_id),
        )
        daemon.engine.observers.append(self._on_fire)
        daemon.skips.listeners.append(self._on_skip)
        daemon.engine.catchup_observers.append(self.metrics.on_catchup)
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
        self.stale_after = max(10.0, 3 * daemon.config.zk.session_timeout)

    def _on_fire(self, event: Mapping[str, object]) -> None:
        self.metrics.on_fire(event)
        self.activity.on_fire(event)

    def _on_skip(self, job: str, reason: str, count: int) -> None:
        self.metrics.on_skip(job, reason, count)
        self.activity.on_skip(job, reason, count)

    def health(self) -> Probe:
        d = self._daemon
        if d.stopping:
            return Probe(False, "stopping")
        now_mono, now_clock = time.monotonic(), d.clock.now()
        ages = {
            "cluster coordinator": now_mono - d.cluster.heartbeat,
            "job table watcher": now_mono - d.jobs.heartbeat,
            "fire timer": now_clock - d.engine.heartbeat,  # the timer beats on d.clock
        }
        stale = [
            f"{name} last beat {age:.0f}s ago" if age < 86_400 else f"{name} never ran"
            for name, age in ages.items()
            if age > self.stale_after
        ]
        if stale:
            return Probe(False, "; ".join(stale))
        return Probe(True, "ok")

    def readiness(self) -> Probe:
        d = self._daemon
        view = d.cluster.view
        if d.stopping:
            return Probe(False, "stopping")
        if not view.connected:
            return Probe(False, "not connected to ZooKeeper")
        if not view.active:
            return Probe(False, "not in the member table yet")
        if d.jobs.snapshot.generation < 0:
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
        for as long as they may be served here (`probes.py`)."""
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
        d = self._daemon
        view = d.cluster.view
        table = view.table
        entries = d.jobs.snapshot.entries
        now = d.clock.now()
        now_dt = d.clock.now_dt()
        last = self.activity.last_results()
        if len(last) > len(entries):
            self.activity.forget_jobs_except(set(entries))
        jobs = job_rows(entries, table, now_dt, last)
        members = member_rows(table, jobs, view.member_id, clock_offsets(d))
        fires, skips = self.activity.recent()
        ready, health = self.readiness(), self.health()
        return StatusSnapshot(
            client_id=d.config.client_id,
            member_id=view.member_id,
            version=__version__,
            generated_at=now,
            connected=view.connected,
            ready_problem=None if ready.ok else ready.reason,
            health_problem=None if health.ok else health.reason,
            table_generation=d.jobs.snapshot.generation,
            members=members,
            jobs=jobs,
            skips=skips,
            fires=fires,
            skip_totals=self.activity.skip_totals(),
        )


def clock_offsets(daemon: Daemon) -> dict[str, float]:
    """Clock offsets from ZooKeeper's clock in seconds, by member id, as far as this daemon
    knows them without asking ZooKeeper: its own probe's last reading. (Other members publish
    theirs in ZooKeeper; `zksched members` and `zksched status` read them.)"""
    reading = daemon.clock_probe.last
    if reading is None:
        return {}
    return {daemon.member.member_id: reading.offset_ms / 1000}


class _Server(HTTPServer):
    """Requests are handled by a few threads started once, not a thread per request:
    starting a thread costs several GIL hand-offs, which a probe pays in full while the
    daemon starts hundreds of commands (docs/benchmarks.md, http)."""

    status: DaemonStatus
    workers = 4  # a slow status page render never holds up a probe

    def server_activate(self) -> None:
        super().server_activate()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="zksched-http")

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._pool.submit(self._handle, request, client_address)
        except RuntimeError:  # shut down
            self.shutdown_request(request)

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # a client that sends nothing is dropped instead of holding a thread
    server_version = f"zksched/{__version__}"

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def _respond(self, send_body: bool) -> None:
        status = self.server.status
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                code, ctype, body = 200, status.metrics.content_type, status.metrics_body()
            elif path in ("/healthz", "/readyz"):
                probe = status.health() if path == "/healthz" else status.readiness()
                code = 200 if probe.ok else 503
                ctype, body = "text/plain; charset=utf-8", (probe.reason + "\n").encode()
            elif path in ("/", "/index.html"):
                code, ctype, body = 200, PAGE_TYPE, status.page()
            else:
                code, ctype, body = 404, "text/plain; charset=utf-8", b"not found\n"
        except Exception:
            log.exception("HTTP %s failed", path)
            code, ctype, body = 500, "text/plain; charset=utf-8", b"internal error\n"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http %s " + format, self.address_string(), *args)


def _publish(
    bodies: PublishedBodies, name: str, ctype: str, stale_max: float, body: bytes, at: float
) -> None:
    """A new body for the child, to be served until `stale_max` after its render began."""
    bodies.write(name, ctype, body, at + stale_max)


def _memory_dir() -> str | None:
    """/dev/shm when it can be written to, else None (the system's temporary directory)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class HttpEndpoint:
    """Listens on `address` (HOST:PORT; port 0 picks a free one) once started."""

    def __init__(self, status: DaemonStatus, address: str) -> None:
        self.status = status
        self.address = address
        self.host, self.port = parse_http_address(address)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._probes: ProbeProcess | None = None
        self._bodies_dir: str | None = None

    @property
    def url(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind now (HttpUnavailable if it cannot), then serve: the public socket from a
        child process (`probes.py`), which answers the probes itself and relays the rest to
        this process's own server on a loopback port."""
        if self._server is not None:
            return
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        public = socket.socket(family, socket.SOCK_STREAM)
        try:
            public.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            public.bind((self.host, self.port))
            public.listen(128)
        except OSError as exc:
            public.close()
            raise HttpUnavailable(
                f"--http {self.address}: cannot listen: {exc.strerror or exc}"
            ) from None
        self.port = public.getsockname()[1]
        server = _Server(("127.0.0.1", 0), _Handler)
        server.status = self.status
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="zksched-http",
            daemon=True,
        )
        self._thread.start()
        status = self.status
        # bodies for the child, readable by this user only (they name jobs and members), in
        # memory (tmpfs) where there is one: /metrics is rewritten every second when scraped
        self._bodies_dir = tempfile.mkdtemp(prefix="zksched-http-", dir=_memory_dir())
        bodies = PublishedBodies(self._bodies_dir)
        status.publish_to(bodies)
        self._probes = ProbeProcess(
            public,
            server.server_address[1],
            health=lambda: astuple(status.health()),
            readiness=lambda: astuple(status.readiness()),
            stale_after=status.stale_after,
            bodies=bodies,
            on_asked=status.asked,
        )
        try:
            self._probes.start()
        except OSError as exc:
            self.stop()
            raise HttpUnavailable(
                f"--http {self.address}: cannot start the HTTP process: {exc}"
            ) from None
        log.info(
            "HTTP endpoint on %s (/metrics /healthz /readyz /)",
            self.url,
            extra={"event": "http", "url": self.url},
        )

    def stop(self) -> None:
        self.status.close()
        probes, self._probes = self._probes, None
        if probes is not None:
            probes.stop()
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._bodies_dir is not None:
            shutil.rmtree(self._bodies_dir, ignore_errors=True)
            self._bodies_dir = None
