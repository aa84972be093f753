"""The daemon's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` and the status page `/`.

`HttpEndpoint` binds the public socket and hands it to a child process (`probes.py`),
which answers the probes itself and relays the rest to this process's own server: stdlib
`HTTPServer` on a loopback port and a daemon thread, with a few handler threads started
once. Its handlers only read what `DaemonStatus` (`daemonstatus.py`) holds in memory; they
never call ZooKeeper, so a slow or cut-off ZooKeeper cannot make a probe hang.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from zksched._version import __version__
from zksched.runtime.status.address import HttpUnavailable, parse_http_address
from zksched.runtime.status.child_process import ProbeProcess
from zksched.runtime.status.child_server import CONTENT_SECURITY_POLICY, PublishedBodies
from zksched.runtime.status.daemon_status import PAGE_TYPE, DaemonStatus

log = logging.getLogger(__name__)


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
