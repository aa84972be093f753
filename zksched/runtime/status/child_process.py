"""The daemon's side of the HTTP child process (`probes.py`): `ProbeProcess` starts the
child on the public socket, sends it the daemon's verdicts every `PUBLISH_EVERY` seconds,
tells the daemon which published copies it served, and replaces a child that exited or
stopped reading (within `RESPAWN_EVERY`, on the same socket).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from zksched.runtime.status.child_server import PublishedBodies, Verdict

# Logged as before ProbeProcess left probes.py: the name is in every log line.
log = logging.getLogger("zksched.runtime.status.child_server")

PUBLISH_EVERY = 0.25  # seconds between two verdicts sent to the child
RESPAWN_EVERY = 1.0  # seconds between two attempts to replace a child that exited


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
                    "zksched.runtime.status.child_server",
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
