"""The daemon's public HTTP socket, served by a small child process.

`/healthz` and `/readyz` must answer within milliseconds whatever the daemon is doing. In the
daemon itself every request needs its interpreter lock, which a burst of hundreds of command
starts keeps busy: probes answered there took up to 50-85 ms in a 2,000-job burst
(docs/benchmarks.md, http). So the public socket belongs to a child process that does
nothing else (`python -m zksched.runtime.probes`):

- the daemon publishes its health and readiness verdicts to the child every
  `PUBLISH_EVERY` seconds (one JSON line on a pipe); the child answers `/healthz` and
  `/readyz` from the latest one. A verdict older than `stale_after` seconds is itself a
  failure ("no word from the daemon"): a daemon too stuck to publish is not healthy;
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
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from zksched import __version__

log = logging.getLogger(__name__)

PUBLISH_EVERY = 0.25  # seconds between two verdicts sent to the child
RESPAWN_EVERY = 1.0  # seconds between two attempts to replace a child that exited
MAX_REQUESTS = 64  # requests the child serves at once
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


class ProbeProcess:
    """Daemon side: start the child on `public` (a listening socket), keep it informed."""

    def __init__(
        self,
        public: socket.socket,
        upstream_port: int,
        health: Callable[[], Verdict],
        readiness: Callable[[], Verdict],
        stale_after: float,
        bodies: PublishedBodies,
        on_asked: Callable[[str], None],
    ) -> None:
        self._public = public
        self._upstream_port = upstream_port
        self._health = health
        self._readiness = readiness
        self._stale_after = stale_after
        self._bodies = bodies
        self._on_asked = on_asked  # called with a PUBLISHED_PATHS name the child served
        self._process: subprocess.Popen[bytes] | None = None
        self._pipe: int | None = None
        self._asked: int | None = None  # read end of the child's "served a copy" pipe
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._spawn()
        self._publish()  # the first verdict before any probe can ask
        self._thread = threading.Thread(target=self._run, name="zksched-probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._end_child(bye=True)
        self._public.close()

    def _spawn(self) -> None:
        read_end, write_end = os.pipe()  # both close-on-exec: no job command inherits them
        asked_read, asked_write = os.pipe()
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "zksched.runtime.probes",
                    str(self._public.fileno()),
                    str(read_end),
                    str(self._upstream_port),
                    str(self._stale_after),
                    self._bodies.directory,
                    str(asked_write),
                ],
                # the socket stays open here too (never accepted on): a child that dies is
                # replaced on the same socket, and probes in between wait in its backlog
                pass_fds=(self._public.fileno(), read_end, asked_write),
                stdin=subprocess.DEVNULL,
                close_fds=True,
                # the daemon's own code, wherever it was imported from; none of the daemon's
                # environment (it may hold ZooKeeper credentials)
                env={"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                # its own process group: a Ctrl-C at the terminal stops the daemon (which
                # stops it in turn), not the child mid-stop with a traceback
                process_group=0,
            )
        except BaseException:
            os.close(write_end)
            os.close(asked_read)
            raise
        finally:
            os.close(read_end)
            os.close(asked_write)
        # never blocks: a child that stops reading (frozen) is replaced, not waited for
        os.set_blocking(write_end, False)
        os.set_blocking(asked_read, False)
        self._pipe, self._asked = write_end, asked_read

    def _end_child(self, bye: bool = False) -> None:
        """Close the pipes (the child exits at end of file) and reap it. `bye`: tell it
        first that this is a stop, not the daemon's death, so that it leaves the published
        bodies to the daemon (a child whose daemon died removes them itself)."""
        asked, self._asked = self._asked, None
        if asked is not None:
            os.close(asked)
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            if bye:
                with contextlib.suppress(OSError):  # full: it stopped reading; it is killed
                    os.write(pipe, b'{"bye": true}\n')
            os.close(pipe)
        process, self._process = self._process, None
        if process is not None:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _run(self) -> None:
        next_spawn = 0.0
        while not self._stop.wait(PUBLISH_EVERY):
            process = self._process
            if process is None or process.poll() is not None:
                if time.monotonic() < next_spawn:
                    continue
                next_spawn = time.monotonic() + RESPAWN_EVERY
                log.warning(
                    "the HTTP probe process exited (%s); starting a new one",
                    None if process is None else process.returncode,
                )
                try:
                    self._end_child()
                    self._spawn()
                except Exception:
                    log.exception("starting the HTTP probe process failed; will retry")
                    continue
            self._pass_on_asked()
            try:
                self._publish()
            except BlockingIOError:  # it stopped reading: replaced at the next turn
                log.warning("the HTTP probe process stopped reading; replacing it")
                with contextlib.suppress(OSError):
                    if self._process is not None:
                        self._process.kill()
            except OSError:  # it just died: replaced at the next turn
                pass
            except Exception:
                log.exception("publishing health to the HTTP probe process failed")

    def _pass_on_asked(self) -> None:
        """Tell the daemon which published copies the child served since the last turn."""
        asked, names = self._asked, set[str]()
        while asked is not None:
            try:
                data = os.read(asked, 4096)
            except OSError:  # BlockingIOError included: nothing more to read
                break
            if not data:
                break
            names.update(chr(b) for b in data)
        for name in names:
            try:
                self._on_asked(name)
            except Exception:
                log.exception("passing on a request for %r failed", name)

    def _publish(self) -> None:
        pipe = self._pipe
        if pipe is None:
            return
        line = json.dumps({"health": self._health(), "ready": self._readiness()}) + "\n"
        os.write(pipe, line.encode())


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

    def server_bind(self) -> None:  # the socket is bound and listening already
        self.server_address = self.socket.getsockname()

    def server_activate(self) -> None:
        pass


class _ProbeHandler(BaseHTTPRequestHandler):
    server: _ProbeServer
    timeout = 10  # a client that sends nothing is dropped
    protocol_version = "HTTP/1.0"
    server_version = f"zksched/{__version__}"

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
    # a thread per request (at most MAX_REQUESTS at once): a slow relayed page never holds
    # up a probe, and this process does nothing else, so a thread start is cheap here
    slots = threading.BoundedSemaphore(MAX_REQUESTS)
    while True:
        try:
            request, address = server.get_request()
        except OSError:  # e.g. out of file descriptors: do not spin
            time.sleep(0.05)
            continue
        if not slots.acquire(timeout=1.0):
            server.shutdown_request(request)  # flooded: drop rather than pile up
            continue
        try:
            threading.Thread(
                target=_serve_one, args=(server, request, address, slots), daemon=True
            ).start()
        except RuntimeError:  # no thread to be had
            slots.release()
            server.shutdown_request(request)


def _serve_one(
    server: _ProbeServer, request: socket.socket, address: Any, slots: threading.Semaphore
) -> None:
    try:
        server.finish_request(request, address)
    except Exception:
        pass  # a client that hung up mid-request
    finally:
        server.shutdown_request(request)
        slots.release()


if __name__ == "__main__":
    main(sys.argv[1:])
