"""The reaper: a small child process that takes a dead daemon's commands with it.

A command runs in a process group of its own, so a daemon killed by SIGKILL or the OOM
killer would leave it running while its ZooKeeper session expires and another member
starts the job again: two runs of an `overlap = "skip"` job. `PR_SET_PDEATHSIG` cannot
help (it fires when the forking *thread* ends, and reaches the direct child only). So the
daemon starts this process at once, in a session of its own (a kill of the daemon's group
does not reach it), and tells it over a pipe which process groups are its commands':

    +<pgid>     a command started
    -<pgid>     it ended (reaped)
    g<seconds>  the grace from now on (the daemon learns its session timeout on connecting)

A command may start (and the daemon die) before its `+<pgid>` is written: so every command
also carries the reaper's tag in its environment (`ZKSCHED_REAPER_TAG`), and when the pipe
closes the reaper adds the groups of the processes whose environment holds it.

When the pipe closes, however the daemon ended, the reaper sends SIGTERM and SIGCONT to
every group still listed, SIGKILL to what is left after `grace` seconds, and exits. The
daemon's session cannot expire before it times out, so with `grace` well under the
session timeout no command of a dead member outlives its session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid

log = logging.getLogger(__name__)

TAG_VARIABLE = "ZKSCHED_REAPER_TAG"


READ_PAUSE = 0.02  # seconds the reaper lets lines gather between reads (one wake-up for many)


_MODULE = "zksched.runtime.run.reaper"  # this file, run as the reaper child


class Reaper:
    def __init__(self, grace: float) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None  # the pipe's write end
        self._grace = grace
        self.tag = uuid.uuid4().hex  # in every command's environment (TAG_VARIABLE)

    def start(self) -> None:
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", _MODULE, f"{self._grace:.3f}", self.tag],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
            assert self._process.stdin is not None
            self._fd = self._process.stdin.fileno()
        except OSError as exc:
            log.error(
                "cannot start the reaper (%s): a killed daemon's commands would outlive it", exc
            )

    def watch(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def set_grace(self, grace: float) -> None:
        """Change the grace between SIGTERM and SIGKILL (it must stay well under the
        session timeout the server granted, which is known only once connected)."""
        if grace > 0 and abs(grace - self._grace) >= 0.001:
            self._grace = grace
            self._send(f"g{grace:.3f}\n")

    def close(self) -> None:
        """A graceful stop: whatever is still listed is stopped, and the reaper exits."""
        process, self._process, self._fd = self._process, None, None
        if process is None or process.stdin is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(self._grace + 2.0)

    def _send(self, line: str) -> None:
        # One write of less than PIPE_BUF bytes is atomic: starts on several threads need no
        # lock (a lock held across the write made them queue behind each other).
        fd = self._fd
        if fd is None:
            return
        try:
            os.write(fd, line.encode())
        except OSError:  # it died: nothing more to tell it
            self._fd = None


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def tagged_groups(tag: str) -> set[int]:
    """The process groups of the processes whose environment carries `tag` (commands that
    started before the daemon could list them)."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    groups: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    groups.add(os.getpgid(int(entry)))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    groups.discard(os.getpgrp())
    return groups


def main(grace: float, tag: str = "") -> None:
    """Read the daemon's pipe until it closes, then stop every group still listed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C at the terminal is the daemon's
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the daemon's pipe alone ends us
    groups: set[int] = set()
    partial = b""
    while chunk := os.read(0, 65536):
        *lines, partial = (partial + chunk).split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                if line.startswith(b"+"):
                    groups.add(int(line[1:]))
                elif line.startswith(b"-"):
                    groups.discard(int(line[1:]))
                elif line.startswith(b"g") and 0 < float(line[1:]) < 3600:
                    grace = float(line[1:])
        time.sleep(READ_PAUSE)  # a burst of starts wakes this process a few times, not once each
    if tag:
        groups |= tagged_groups(tag)
    alive = [g for g in groups if _alive(g)]
    for pgid in alive:
        _signal(pgid, signal.SIGTERM)
        _signal(pgid, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [g for g in alive if _alive(g)]
    for pgid in alive:
        _signal(pgid, signal.SIGKILL)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0, sys.argv[2] if len(sys.argv) > 2 else "")
