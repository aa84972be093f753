"""`zksched run` as a subprocess that logs JSON lines to a file.

One class for everything that starts real daemons and reads what they did: the
integration tests (integration/harness.py), the cluster benchmarks (bench/cluster.py) and
the chaos run (chaos/cluster.py). The daemon is started with `--log-format json` and its HTTP
endpoint off (daemons side by side on one host would want the same port; a later `--http`
in `run_args` wins), in a session of its own so that a signal reaches it alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from zksched.runtime.daemon import member_id_of

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class EventLog:
    """The JSON lines of one log file, read incrementally (only whole lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._events: list[dict[str, Any]] = []

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every record so far, or only those whose `event` is `name`. A line that is not a
        JSON object (a traceback, say) is kept as {"event": "raw", "msg": line}."""
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as log:
            log.seek(self._offset)
            chunk = log.read()
            end = chunk.rfind(b"\n") + 1
            self._offset += end
            for line in chunk[:end].splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    record = {"event": "raw", "msg": line.decode(errors="replace")}
                self._events.append(record)
        if name is None:
            return list(self._events)
        return [e for e in self._events if e.get("event") == name]


@dataclass
class DaemonProcess:
    """One `zksched run` subprocess; `start()` it, then watch, signal and stop it."""

    zk: str
    client_id: str
    log_path: Path
    session_timeout: float
    labels: Mapping[str, str] = field(default_factory=dict)
    run_args: Sequence[str] = ()  # more `zksched run` options
    env: Mapping[str, str] | None = None  # its whole environment; None: this process's
    entry: Sequence[str] = ("-m", "zksched")  # what runs the command line (a test hook's)
    process: subprocess.Popen[bytes] | None = None
    _log: EventLog | None = None

    def command(self) -> list[str]:
        args = [sys.executable, *self.entry, "--zk", self.zk, "--client-id", self.client_id]
        args += ["--log-format", "json", "run", "--session-timeout", str(self.session_timeout)]
        for key, value in self.labels.items():
            args += ["--label", f"{key}={value}"]
        return [*args, "--http", "", *self.run_args]

    def start(self) -> Self:
        self._log = EventLog(self.log_path)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if self.env is None else dict(self.env),
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    @property
    def member_id(self) -> str:
        return member_id_of(self.pid)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def send(self, sig: int) -> float:
        """Send `sig` (nothing if it has exited and been reaped); the wall-clock time it was
        sent, to compare with the times in logs."""
        sent = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        return sent

    def wait(self, timeout: float) -> int:
        """Its exit status; subprocess.TimeoutExpired if it is still running by then."""
        assert self.process is not None, "not started"
        return self.process.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Send `sig` and wait for the exit; SIGKILL if it takes longer than `timeout`."""
        if not self.alive:
            return
        self.send(sig)
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            self.wait(10)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return [] if self._log is None else self._log.events(name)

    def members_seen(self) -> int:
        """How many members its latest owner table had (0 before the first)."""
        found = self.events("members")
        return len(found[-1]["members"]) if found else 0

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def cpu_seconds(self, children: bool = False) -> float:
        """CPU time of the daemon (utime + stime), or of the commands it has reaped."""
        return process_cpu_seconds(self.pid, children)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


def process_cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU time of a process (utime + stime), or of the children it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    first = 13 if children else 11  # cutime + cstime, or utime + stime
    return (int(fields[first]) + int(fields[first + 1])) / CLOCK_TICKS
