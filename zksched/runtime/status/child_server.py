"""The daemon's public HTTP socket, served by a small child process.

`/healthz` and `/readyz` must answer within milliseconds whatever the daemon is doing. In the
daemon itself every request needs its interpreter lock, which a burst of hundreds of command
starts keeps busy: probes answered there took up to 50-85 ms in a 2,000-job burst
(docs/benchmarks.md, http). So the public socket belongs to a child process that does
nothing else (`python -m zksched.runtime.status.child_server`):

- the daemon publishes its health and readiness verdicts to the child every
  `PUBLISH_EVERY` seconds (one JSON line on a pipe; `probeprocess.py`); the child answers
  `/healthz` and `/readyz` from the latest one. A verdict older than `stale_after` seconds
  is itself a failure ("no word from the daemon"): a daemon too stuck to publish is not
  healthy;
- `/metrics` and the status page are served from copies the daemon publishes after each
  render (`PublishedBodies`: a file per body in a private directory, with the monotonic
  time until which it may be served), so a scrape never waits for the daemon either; the
  child tells the daemon of each such request over a second pipe (one byte), which keeps
  the daemon rendering while someone is looking (`sharedrender.py`);
- every other path, and those two when no copy is recent enough, is relayed to the daemon's
  own HTTP server, which listens on a loopback port of its choosing;
- the child exits when the pipe closes, i.e. when the daemon stops or dies (even by
  SIGKILL), so it never outlives it; one that exits on its own is replaced within a second,
  on the same socket (the daemon keeps it open without accepting on it);
- it has its own process group, so signals meant for the daemon's terminal reach the daemon
  only, and the probes are answered through a graceful stop (`/readyz` then says
  "stopping").

The daemon binds the public socket itself, before the child starts (an address in use is
the daemon's start-up error, as before), and shares it with the child.

This module is the child, and what it shares with the daemon (the paths served from copies,
`PublishedBodies`, the verdicts' shape); the daemon's side, which starts the child, keeps it
informed and replaces it, is `ProbeProcess` (`probeprocess.py`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from zksched._version import __version__

MAX_CONNECTIONS = 256  # connections the child reads a request line from at once
MAX_REQUESTS = 64  # requests other than probes the child serves at once
PER_ADDRESS = 8  # ...of which one client address may hold at most this many
LINE_DEADLINE = 1.0  # seconds a client has to send its request line
REQUEST_DEADLINE = 5.0  # ...and its whole request (headers included)
PROBE_PATHS = ("/healthz", "/readyz")
RELAY_TIMEOUT = 30.0  # seconds the child waits for the daemon's answer to a relayed request
RELAYED_HEADERS = (
    "Content-Type",
    "Cache-Control",
    "X-Content-Type-Options",
    "Content-Security-Policy",
)
# The daemon's pages need no script and no outside resource: forbid both.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'"
# Says where an answer came from: "copy" (published by the daemon) or "daemon" (relayed).
SERVED_HEADER = "X-Zksched-Served"
# Paths served from a published copy -> the copy's name (also the byte sent to the daemon).
PUBLISHED_PATHS = {"/metrics": "m", "/": "p", "/index.html": "p"}


class PublishedBodies:
    """Rendered bodies the daemon hands to the child: one file per name in a directory only
    their user can read, replaced atomically. Each starts with a JSON line: its content
    type and the time (`time.monotonic()`, one clock for every process of the host) until
    which it may be served."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def write(self, name: str, content_type: str, body: bytes, serve_until: float) -> None:
        header = json.dumps({"type": content_type, "until": serve_until}).encode()
        path = os.path.join(self.directory, name)
        temporary = f"{path}.new"
        with open(temporary, "wb") as out:
            out.write(header + b"\n" + body)
        os.replace(temporary, path)

    def read(self, name: str) -> tuple[str, bytes] | None:
        """(content type, body) if a copy may be served now, else None."""
        try:
            with open(os.path.join(self.directory, name), "rb") as copy:
                data = copy.read()
            header_line, _, body = data.partition(b"\n")
            header = json.loads(header_line)
            if time.monotonic() > float(header["until"]):
                return None
            return str(header["type"]), body
        except (OSError, ValueError, KeyError, TypeError):
            return None


Verdict = tuple[bool, str]  # (ok, reason)


# -- the child process -----------------------------------------------------------------------


class _Verdicts:
    def __init__(self, stale_after: float) -> None:
        self.stale_after = stale_after
        self._lock = threading.Lock()
        self._at = time.monotonic()
        self._health: Verdict = (False, "no word from the daemon yet")
        self._ready: Verdict = (False, "no word from the daemon yet")

    def update(self, health: Verdict, ready: Verdict) -> None:
        with self._lock:
            self._at, self._health, self._ready = time.monotonic(), health, ready

    def get(self, which: str) -> Verdict:
        with self._lock:
            age = time.monotonic() - self._at
            verdict = self._health if which == "health" else self._ready
        if age > self.stale_after:
            return False, f"no word from the daemon for {age:.0f}s"
        return verdict


class _ProbeServer(HTTPServer):
    verdicts: _Verdicts
    upstream_port: int
    bodies: PublishedBodies
    asked: int  # write end of the "served a copy" pipe (non-blocking)
    slots: _Slots  # for requests other than probes

    def server_bind(self) -> None:  # the socket is bound and listening already
        self.server_address = self.socket.getsockname()

    def server_activate(self) -> None:
        pass


class _Busy(Exception):
    """No slot for this request: it is answered 503 and the connection dropped."""


_BUSY_TEXT = b"too many requests at once from this address, or in all: try again\n"
BUSY_RESPONSE = (
    b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT)
)


class _DeadlineReader:
    """A request's input: its request line must arrive within LINE_DEADLINE, the whole
    request within REQUEST_DEADLINE (a client that sends a header line every few seconds
    cannot hold a slot for long). Once the request line is in, a request other than a probe
    takes one of the slots (`_Slots`): none left for its address, and it is refused; a probe
    needs none, so slow clients cannot starve /healthz."""

    def __init__(self, raw: Any, handler: _ProbeHandler) -> None:
        self._raw, self._handler = raw, handler
        started = time.monotonic()
        self._deadline = started + LINE_DEADLINE
        self._request_deadline = started + REQUEST_DEADLINE
        self._first = True

    def readline(self, limit: int = -1) -> bytes:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long to arrive")
        self._handler.connection.settimeout(left)
        line: bytes = self._raw.readline(limit)
        if self._first:
            self._first = False
            self._deadline = self._request_deadline
            self._handler.request_line_read(line)
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _ProbeHandler(BaseHTTPRequestHandler):
    server: _ProbeServer
    timeout = 10  # a client that sends nothing is dropped
    protocol_version = "HTTP/1.0"
    server_version = f"zksched/{__version__}"
    slot: str | None = None  # the address whose slot this request holds

    def setup(self) -> None:
        super().setup()
        self.rfile = _DeadlineReader(self.rfile, self)  # type: ignore[assignment]

    def request_line_read(self, line: bytes) -> None:
        parts = line.split()
        path = parts[1].split(b"?", 1)[0].decode("latin-1") if len(parts) > 1 else ""
        if path in PROBE_PATHS:
            return
        address = self.client_address[0] if isinstance(self.client_address, tuple) else ""
        if not self.server.slots.take(address):
            # said, not just dropped: a scraper shows why (the client's socket may still be
            # sending headers; the answer is small enough for any send buffer)
            with contextlib.suppress(OSError):
                self.wfile.write(BUSY_RESPONSE)
            raise _Busy(address)
        self.slot = address

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self.slot is not None:
                self.server.slots.give_back(self.slot)
                self.slot = None

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def _respond(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/healthz", "/readyz"):
            ok, reason = self.server.verdicts.get("health" if path == "/healthz" else "ready")
            self._send(200 if ok else 503, None, (reason + "\n").encode(), send_body)
            return

        name = PUBLISHED_PATHS.get(path)
        if name is not None:
            with contextlib.suppress(OSError):  # full (the daemon is not reading): no matter
                os.write(self.server.asked, name.encode())
            copy = self.server.bodies.read(name)
            if copy is not None:
                content_type, body = copy
                headers = {
                    "Content-Type": content_type,
                    "Cache-Control": "no-store",
                    "X-Content-Type-Options": "nosniff",
                    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                    SERVED_HEADER: "copy",
                }
                self._send(200, headers, body, send_body)
                return
        try:
            status, headers, body = self._relay()
        except (OSError, http.client.HTTPException) as exc:
            body = f"the daemon did not answer: {exc}\n".encode()
            self._send(502, None, body, send_body)
            return
        except ValueError:  # a path http.client refuses to send (control or non-ASCII chars)
            self._send(400, None, b"bad request path\n", send_body)
            return
        self._send(status, {**headers, SERVED_HEADER: "daemon"}, body, send_body)

    def _relay(self) -> tuple[int, dict[str, str], bytes]:
        upstream = http.client.HTTPConnection(
            "127.0.0.1", self.server.upstream_port, timeout=RELAY_TIMEOUT
        )
        try:
            # HEAD is relayed as GET (the body dropped when sent), so its length is right
            upstream.request("GET", self.path)
            reply = upstream.getresponse()
            body = reply.read()
            headers = {name: value for name in RELAYED_HEADERS if (value := reply.getheader(name))}
            return reply.status, headers, body
        finally:
            upstream.close()

    def _send(
        self, status: int, headers: dict[str, str] | None, body: bytes, send_body: bool
    ) -> None:
        """`headers` None: a plain-text answer of our own."""
        if headers is None:
            headers = {
                "Content-Type": "text/plain; charset=utf-8",
                "Cache-Control": "no-store",
                "X-Content-Type-Options": "nosniff",
            }
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the daemon logs what it serves; probes every few seconds are not news


def _follow(pipe: int, verdicts: _Verdicts, bodies: PublishedBodies) -> None:
    """Read the daemon's verdicts; at end of file (the daemon stopped or died) exit. A
    daemon that died (no "bye" first, e.g. SIGKILL) cannot remove its published bodies:
    this process does."""
    bye = False
    with os.fdopen(pipe, "rb") as lines:
        for line in lines:
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                message = json.loads(line)
                if message.get("bye"):
                    bye = True
                    continue
                health, ready = message["health"], message["ready"]
                verdicts.update((bool(health[0]), str(health[1])), (bool(ready[0]), str(ready[1])))
    if not bye:
        shutil.rmtree(bodies.directory, ignore_errors=True)
    os._exit(0)


def main(argv: list[str]) -> None:
    listen_fd, pipe, upstream_port, stale_after, bodies_dir, asked = argv
    verdicts = _Verdicts(float(stale_after))
    sock = socket.socket(fileno=int(listen_fd))
    server = _ProbeServer(sock.getsockname(), _ProbeHandler, bind_and_activate=False)
    server.socket = sock
    server.server_bind()
    server.verdicts = verdicts
    server.upstream_port = int(upstream_port)
    server.bodies = PublishedBodies(bodies_dir)
    server.asked = int(asked)
    os.set_blocking(server.asked, False)
    threading.Thread(target=_follow, args=(int(pipe), verdicts, server.bodies), daemon=True).start()
    # a thread per connection (at most MAX_CONNECTIONS): a slow relayed page never holds up
    # a probe, and this process does nothing else, so a thread start is cheap here
    server.slots = _Slots()
    connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
    while True:
        try:
            request, address = server.get_request()
        except OSError:  # e.g. out of file descriptors: do not spin
            time.sleep(0.05)
            continue
        if not connections.acquire(timeout=1.0):
            server.shutdown_request(request)  # flooded: drop rather than pile up
            continue
        try:
            threading.Thread(
                target=_serve_one, args=(server, request, address, connections), daemon=True
            ).start()
        except RuntimeError:  # no thread to be had
            connections.release()
            server.shutdown_request(request)


class _Slots:
    """MAX_REQUESTS slots for requests other than probes, at most PER_ADDRESS per address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used = 0
        self._per_address: dict[str, int] = {}

    def take(self, address: str) -> bool:
        with self._lock:
            mine = self._per_address.get(address, 0)
            if self._used >= MAX_REQUESTS or mine >= PER_ADDRESS:
                return False
            self._used += 1
            self._per_address[address] = mine + 1
            return True

    def give_back(self, address: str) -> None:
        with self._lock:
            self._used -= 1
            left = self._per_address.get(address, 1) - 1
            if left:
                self._per_address[address] = left
            else:
                self._per_address.pop(address, None)


def _serve_one(
    server: _ProbeServer, request: socket.socket, address: Any, connections: threading.Semaphore
) -> None:
    try:
        server.finish_request(request, address)
    except Exception:
        pass  # a client that hung up mid-request, too slow to send it, or no slot for it
    finally:
        server.shutdown_request(request)
        connections.release()


if __name__ == "__main__":
    main(sys.argv[1:])
