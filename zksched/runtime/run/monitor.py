"""One run's state machine (`_Monitor`): reads its output, watches its exit, enforces its
deadlines and kills its process group. The supervisor thread (`supervisor.py`) advances it
when one of its descriptors is ready, a deadline of its passes, or it is terminated; every
kill decision is in `_Monitor._step`.

- **Kills.** A timeout or `terminate()` sends SIGTERM to the whole group and SIGKILL after
  ``kill_grace`` seconds. The run ends when the command itself exits; processes it left
  behind in its group are stopped the same way (SIGTERM, SIGKILL after ``kill_grace``), so a
  finished run leaves nothing running that ``overlap = "skip"`` could not see. A process
  that must outlive its run has to leave the group (``setsid``).
- **Output.** The pipes are always read to the end (`outputlog.py` decides what is logged).
  After the process group is gone, output is read for at most ``output_drain`` more
  seconds (a process that left the group may keep the pipes open forever); then they are
  closed.
- **The group id stays ours.** The exit is seen through a pidfd (Linux; elsewhere it is
  polled every 20 ms) and observed with ``waitid(WNOWAIT)``: the command stays a zombie
  until the monitor reaps it, so its process group id cannot be reused while we may still
  signal it. Whether a group still has live members after that is asked of
  ``kill(-pgid, 0)`` and, when it says yes, of /proc: orphaned zombies count as members
  until init reaps them, and some container inits never do.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import time
from typing import Literal, Protocol

from zksched.runtime.run.handle import RunningCommand
from zksched.runtime.run.output import _OutputLog
from zksched.runtime.run.reaper import Reaper
from zksched.runtime.run.request import RunResult

# One logger for all of running a command, whichever module logs (its name is in each line).
log = logging.getLogger("zksched.runtime.run.runner")

_READ_CHUNK = 64 * 1024
# Used only where no pidfd can be waited on: how often to look for the command's exit, and
# (after it exited) whether processes it left in its group are still there.
_POLL_INTERVAL = 0.02


class _Runner(Protocol):
    """What a monitor reads of its `CommandRunner` (read at each step: a change applies to
    runs under way)."""

    kill_grace: float
    max_output_bytes: int
    output_drain: float
    logger: logging.Logger
    reaper: Reaper | None


class _Poller(Protocol):
    """The supervisor, as far as a monitor sees it."""

    def unregister(self, fd: int) -> None: ...


def _describe_exit(code: int) -> str:
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name} ({-code})"


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


class _Monitor:
    """One run's state machine: reads output, watches the exit, enforces deadlines, kills.
    Advanced by the supervisor thread only."""

    def __init__(
        self,
        runner: _Runner,
        run: RunningCommand,
        popen: subprocess.Popen[bytes],
        supervisor: _Poller,
    ) -> None:
        self.runner = runner
        self.run_ = run
        self.popen = popen
        self.pid = popen.pid  # == its process group id (its own group, or session)
        self.supervisor = supervisor
        self.request = run.request
        self.output = _OutputLog(runner.logger, run.request, runner.max_output_bytes)
        self.started_mono = time.monotonic()
        timeout = run.request.timeout
        self.deadline = (
            None if timeout is None or math.isinf(timeout) else self.started_mono + timeout
        )
        assert popen.stdout is not None and popen.stderr is not None
        self.streams: dict[int, str] = {
            popen.stdout.fileno(): "stdout",
            popen.stderr.fileno(): "stderr",
        }
        self.pidfd: int | None = None
        # Without a pidfd (not Linux >= 5.3, or forbidden) the exit is polled for instead.
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(self.pid)

        self.finished_at: float | None = None
        self.reaped = False
        self.cause: Literal["timeout", "terminated"] | None = None
        self.reason: str | None = None
        self.term_at: float | None = None  # monotonic time SIGTERM went to the group
        self.kill_sent = False
        self.group_gone = False
        self.next_group_check = 0.0  # a group check may scan /proc: not once per read
        self.drain_until: float | None = None
        self.lost_status = False
        self.over = False  # no more steps: the result is being delivered
        self.timer: float | None = None  # the wake-up the supervisor holds for us
        self.error: BaseException | None = None

    def fds(self) -> list[int]:
        fds = list(self.streams)
        if self.pidfd is not None and self.finished_at is None:
            fds.append(self.pidfd)
        return fds

    # -- driven by the supervisor -------------------------------------------------------------

    def advance(self, now: float) -> tuple[bool, float | None]:
        """One step; (over, when to look again at the latest). Never raises: a failure
        ends the run with status "error"."""
        try:
            over, wake_at = self._step(now)
        except BaseException as exc:  # a result must come out whatever happens
            self.error = exc
            over, wake_at = True, None
        self.over = over
        return over, wake_at

    def readable(self, fd: int) -> None:
        if fd in self.streams:
            try:
                self._read(fd)
            except BaseException as exc:
                self.error = self.error or exc

    def complete(self) -> None:
        """Deliver the result (the completion thread)."""
        if self.error is not None:
            log.error(
                "job %s: runner failed",
                self.request.job,
                exc_info=self.error,
                extra={"event": "runner-error"},
            )
            if not self.reaped:
                _kill_and_reap(self.popen)
            result = RunResult(
                "error",
                self.popen.returncode,
                self.run_.started_at,
                self.finished_at or time.time(),
                error=f"internal runner error: {self.error!r}",
                output_truncated=self.output.truncated,
            )
        else:
            for stream in self.streams.values():
                self.output.close(stream)
            result = self._result()
        self.run_._close_wake()
        self.close_fds()
        if self.runner.reaper is not None:
            self.runner.reaper.forget(self.popen.pid)
        self.run_._finish(result)

    def close_fds(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
        self.pidfd = None
        _close_popen_pipes(self.popen)

    def _step(self, now: float) -> tuple[bool, float | None]:
        grace = self.runner.kill_grace
        if self.finished_at is None and self._exited() and self.pidfd is not None:
            # once the command has exited its pidfd stays readable: stop polling it
            self.supervisor.unregister(self.pidfd)
        if self.finished_at is None and self.cause is None:
            reason = self.run_._pending_terminate()
            if reason is not None:
                self.cause, self.reason = "terminated", reason
            elif self.deadline is not None and now >= self.deadline:
                self.cause = "timeout"
                self.reason = f"timed out after {_format_seconds(self.request.timeout or 0.0)}"
            if self.cause is not None:
                self._signal_group(signal.SIGTERM)
                self.term_at = now
        if self.finished_at is not None and not self.reaped:
            self._reap()
        if self.reaped and not self.group_gone and now >= self.next_group_check:
            self.next_group_check = now + _POLL_INTERVAL
            if not self._group_alive():
                self.group_gone = True
            elif self.term_at is None:
                log.warning(
                    "job %s exited but left processes in its process group; stopping them",
                    self.request.job,
                    extra={
                        "event": "job-leftovers",
                        "job": self.request.job,
                        "fire_key": self.request.fire_key,
                    },
                )
                self._signal_group(signal.SIGTERM)
                self.term_at = now
        if (
            self.term_at is not None
            and not self.kill_sent
            and not self.group_gone
            and now >= self.term_at + grace
        ):
            self._signal_group(signal.SIGKILL)
            self.kill_sent = True
        if self.reaped and (self.group_gone or self.kill_sent):
            if not self.streams:
                return True, None
            if self.drain_until is None:
                self.drain_until = now + self.runner.output_drain
            elif now >= self.drain_until:
                log.warning(
                    "job %s: output pipes still open after its process group ended "
                    "(a process left the process group?); no longer reading them",
                    self.request.job,
                    extra={
                        "event": "job-output-abandoned",
                        "job": self.request.job,
                        "fire_key": self.request.fire_key,
                    },
                )
                return True, None

        wakeups: list[float] = []
        if self.finished_at is None:
            if self.cause is None and self.deadline is not None:
                wakeups.append(self.deadline)
            if self.pidfd is None:
                wakeups.append(now + _POLL_INTERVAL)
        if self.term_at is not None and not self.kill_sent and not self.group_gone:
            wakeups.append(self.term_at + grace)
        if self.reaped and not self.group_gone and not self.kill_sent:
            wakeups.append(self.next_group_check)  # no fd tells us when a group empties
        if self.drain_until is not None:
            wakeups.append(self.drain_until)
        return False, min(wakeups) if wakeups else None

    # -- steps --------------------------------------------------------------------------------

    def _exited(self) -> bool:
        """Has the command exited? Leaves it a zombie (WNOWAIT) so its pgid stays ours."""
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            # Someone else reaped it (SIGCHLD ignored, or a waitpid(-1) elsewhere).
            self.lost_status = True
            self.reaped = True
        else:
            if info is None:
                return False
        self.finished_at = time.time()
        return True

    def _reap(self) -> None:
        if not self.lost_status:
            self.popen.wait()
        self.reaped = True

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False  # only processes we may not signal are left: nothing we can do
        return _group_has_live_process(self.pid)

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.pid, sig)
            if sig == signal.SIGTERM:
                # a stopped process (SIGSTOP, or a job-control stop) would act on SIGTERM
                # only once continued: continue it, as systemd does
                os.killpg(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        except PermissionError:
            log.warning(
                "job %s: not allowed to send %s to its process group",
                self.request.job,
                sig.name,
                extra={"event": "job-kill-denied", "job": self.request.job},
            )

    def _read(self, fd: int) -> None:
        stream = self.streams[fd]
        data = os.read(fd, _READ_CHUNK)
        if data:
            self.output.feed(stream, data)
            return
        self.supervisor.unregister(fd)
        del self.streams[fd]
        self.output.close(stream)

    def _result(self) -> RunResult:
        started = self.run_.started_at
        finished = self.finished_at if self.finished_at is not None else time.time()
        code = None if self.lost_status else self.popen.returncode
        truncated = self.output.truncated
        if self.cause is not None:
            return RunResult(self.cause, code, started, finished, self.reason, truncated)
        if code is None:
            error = "exit status lost: the process was reaped outside the runner"
            return RunResult("error", None, started, finished, error, truncated)
        if code == 0:
            return RunResult("ok", 0, started, finished, None, truncated)
        return RunResult("failed", code, started, finished, _describe_exit(code), truncated)


def _group_has_live_process(pgid: int) -> bool:
    """Whether a process group that kill() found has a member that is not a zombie.

    Orphaned zombies stay in their group until init reaps them, and some container inits
    never do; without this look, their group would count as alive until SIGKILL."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True  # no /proc: trust kill()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split(b" ", 3)
        if len(fields) >= 3 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _kill_and_reap(popen: subprocess.Popen[bytes]) -> None:
    """Last resort: SIGKILL the group while the command is unreaped (so the pgid is its)."""
    with contextlib.suppress(OSError):
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        popen.wait()


def _close_popen_pipes(popen: subprocess.Popen[bytes]) -> None:
    for pipe in (popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
