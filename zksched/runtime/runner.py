"""Running one job command: spawn it, log its output, bound its time, report what happened.

The daemon's fire path calls `CommandRunner.start()` once it has claimed a fire, then
`RunningCommand.wait()` for the result; another thread may call `terminate()` at any time
(e.g. when the ZooKeeper session is lost).

Policies:

- **No shell.** ``argv`` is exec'd as is; ``argv[0]`` without a slash is looked up in the
  *child's* ``PATH`` (once for commands started together: `ProgramLookup`).
- **Environment.** The child gets ``base_env`` merged with ``request.env`` (the request wins),
  never the daemon's own environment: that holds secrets such as ``ZKSCHED_AUTH``. The
  default ``base_env`` is `default_base_env()`: ``PATH`` (the daemon's, else
  ``/usr/local/bin:/usr/bin:/bin``), and ``LANG``, ``HOME``, ``TZ`` when the daemon has them.
  stdin is ``/dev/null``; the working directory is ``request.cwd`` or ``/``.
- **Process group.** Each command leads a new process group, which holds the command and
  everything it starts. It stays in the daemon's session: on Linux with autogroup scheduling
  (where no cgroup does it) each session is one scheduling group, and commands started as
  sessions of their own each got as much CPU as the whole daemon, so a burst of them
  starved the daemon's own threads (and every other session on the host). Except when the
  daemon has a controlling terminal (run by hand, `docker run -t`, tmux): then each command
  gets a session of its own, so that it cannot reach that terminal (a prompt fails at once
  instead of waiting for an operator, or stopping the command). A timeout or
  `terminate()` sends SIGTERM to the whole group and SIGKILL after ``kill_grace`` seconds.
  The run ends when the command itself exits; processes it left behind in its group are
  stopped the same way (SIGTERM, SIGKILL after ``kill_grace``), so a finished run leaves
  nothing running that ``overlap = "skip"`` could not see. A process that must outlive its
  run has to leave the group (``setsid``).
- **Exit codes.** ``exit_code`` is the command's exit status, or minus the signal number when
  a signal killed it (as `subprocess` reports it: -15 for SIGTERM, -9 for SIGKILL), or None
  when it never started. A timeout or terminate keeps whatever status the command ended
  with (usually -15, or -9 when it ignored SIGTERM, or its own code when it handled SIGTERM).
- **Status.** ``ok``: exit 0. ``failed``: non-zero exit or killed by a signal we did not
  send. ``timeout`` / ``terminated``: we killed it (a command that exited before we acted
  keeps its own status: terminate() racing with exit is harmless). ``error``: it never ran.
  ``error`` carries a one-line explanation for every status but ``ok``.
- **Output.** stdout and stderr are logged line by line to the job logger, at most
  ``max_output_bytes`` per run (then one truncation line); the pipes are always read to the
  end so a chatty command never blocks on a full pipe. After the process group is gone,
  output is read for at most ``output_drain`` more seconds (a process that left the group
  may keep the pipes open forever); then they are closed.

Threads: one supervisor thread per runner watches every run. It polls each run's pipes and
pidfd (Linux; elsewhere the exit is polled every 20 ms) and a wake-up pipe, and enforces
the deadlines, so a timeout holds even if nobody is blocked in wait(). Each run is a small
state machine (`_Monitor.step`) that the supervisor advances when one of its descriptors is
ready, a deadline of its passes, or it is terminated; every kill decision is in one place.
One thread for all runs (instead of one each) keeps a burst of hundreds of starts cheap.
Completions (`on_done` callbacks, which may write to ZooKeeper) run on a second thread, so
that a slow callback never delays the reading of output or a kill. The
command's exit is observed with ``waitid(WNOWAIT)``: the command stays a zombie until the
monitor reaps it, so its process group id cannot be reused while we may still signal it.
Whether a group still has live members after that is asked of ``kill(-pgid, 0)`` and, when
it says yes, of /proc: orphaned zombies count as members until init reaps them, and some
container inits never do.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import logging
import math
import os
import queue
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from zksched.runtime.reaper import Reaper

__all__ = [
    "DEFAULT_PATH",
    "MAX_LINE_BYTES",
    "CommandRunner",
    "RunRequest",
    "RunResult",
    "RunStatus",
    "RunningCommand",
    "default_base_env",
]

log = logging.getLogger(__name__)

RunStatus = Literal["ok", "failed", "timeout", "terminated", "error"]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# Longer lines are cut: one log record should stay readable and bounded.
MAX_LINE_BYTES = 4096
_READ_CHUNK = 64 * 1024
# Used only where no pidfd can be waited on: how often to look for the command's exit, and
# (after it exited) whether processes it left in its group are still there.
_POLL_INTERVAL = 0.02


@dataclass(frozen=True)
class RunRequest:
    job: str
    fire_key: str
    argv: tuple[str, ...]  # exec'd as is: no shell, ever
    env: Mapping[str, str]  # the job's env plus ZKSCHED_* vars, merged by the caller
    cwd: str | None = None  # None -> "/" (never the daemon's cwd); must be absolute
    timeout: float | None = None  # seconds from start; None (or inf) = no limit


@dataclass(frozen=True)
class RunResult:
    status: RunStatus
    exit_code: int | None  # exit status; -N when killed by signal N; None if it never started
    started_at: float  # epoch seconds (time.time())
    finished_at: float  # when the command's exit was seen (== started_at for "error")
    error: str | None = None  # one line on what went wrong; None for "ok"
    output_truncated: bool = False


def default_base_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The minimal environment every job starts from: nothing secret from the daemon."""
    source = os.environ if environ is None else environ
    env = {"PATH": source.get("PATH") or DEFAULT_PATH}
    for name in ("LANG", "HOME", "TZ"):
        value = source.get(name)
        if value is not None:
            env[name] = value
    return env


def has_controlling_terminal() -> bool:
    """Whether this process has a controlling terminal (one its children could open)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


class ProgramLookup:
    """argv[0] looked up in PATH once for many commands started at the same moment (a burst
    of 2,000 `true`s looks it up once, not 2,000 times in each child's failed `execve`s).

    Meant to live for one batch of starts only (they start within a second or so, unless
    they wait for a concurrency slot): a program installed earlier in PATH meanwhile is seen
    by the next batch; one removed or moved meanwhile makes the start look it up again
    (`CommandRunner.start`), as every start did before."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], str | None] = {}

    def find(self, name: str, path: str) -> str | None:
        """The file `execvp` would run for `name` with this PATH; None when `name` has a
        slash, PATH has a relative entry (it would depend on the command's cwd), or nothing
        executable is found (the start then looks it up itself and reports the error)."""
        key = (name, path)
        if key not in self._found:
            self._found[key] = self._lookup(name, path)
        return self._found[key]

    @staticmethod
    def _lookup(name: str, path: str) -> str | None:
        if not name or "/" in name:
            return None
        if not all(os.path.isabs(folder) for folder in path.split(os.pathsep)):
            return None
        return shutil.which(name, path=path)  # an executable file that is not a folder


class CommandRunner:
    def __init__(
        self,
        *,
        kill_grace: float = 5.0,
        max_output_bytes: int = 64 * 1024,
        base_env: Mapping[str, str] | None = None,
        logger: logging.Logger | None = None,
        output_drain: float = 1.0,
    ) -> None:
        if not kill_grace >= 0 or not output_drain >= 0 or max_output_bytes < 0:
            raise ValueError("kill_grace, output_drain and max_output_bytes must be >= 0")
        self.kill_grace = kill_grace
        self.max_output_bytes = max_output_bytes
        self.output_drain = output_drain
        # A snapshot: later changes to the daemon's environment do not reach jobs.
        self.base_env: dict[str, str] = dict(default_base_env() if base_env is None else base_env)
        self.logger = logger if logger is not None else logging.getLogger("zksched.job")
        self._supervisor = _Supervisor()
        # every command's stdin; opened once (subprocess would open it for every start)
        self._devnull: int | None = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        # a session per command only where there is a terminal to keep commands away from
        self.new_sessions = has_controlling_terminal()
        # told of every command's process group, to stop them if the daemon dies (reaper.py)
        self.reaper: Reaper | None = None

    def close(self) -> None:
        """Give back what the runner holds for its starts (a start after this still works,
        opening /dev/null for itself). Runs under way are not affected."""
        devnull, self._devnull = self._devnull, None
        if devnull is not None:
            os.close(devnull)

    def start(
        self,
        request: RunRequest,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
        programs: ProgramLookup | None = None,
    ) -> RunningCommand:
        """Spawn the command. Never raises for a bad command or request: the returned
        RunningCommand then has pid None and wait() gives status "error".

        `on_done` is registered before the command can end, so it runs on the run's own
        thread (not in the caller, which a quick command would otherwise make it).
        `on_exit` is called once, as soon as the run is over and before `on_done`, from the
        supervisor thread: it must be quick and must not block (e.g. release a slot).
        `programs`: where commands started together look argv[0] up (once for all)."""
        started_at = time.time()
        problem = _check_request(request)
        if problem is not None:
            return RunningCommand._failed(request, started_at, problem, on_done, on_exit)
        cwd = "/" if request.cwd is None else request.cwd
        env = {**self.base_env, **request.env}
        path = env.get("PATH")
        program = None if programs is None or path is None else programs.find(request.argv[0], path)
        try:
            try:
                popen = self._spawn(request, cwd, env, program)
            except OSError:
                if program is None:
                    raise
                # gone or changed since the batch looked it up: look it up now, as execvp would
                popen = self._spawn(request, cwd, env, None)
        except (OSError, ValueError, TypeError, subprocess.SubprocessError) as exc:
            error = _describe_start_error(exc, request.argv[0], cwd)
            return RunningCommand._failed(request, started_at, error, on_done, on_exit)
        if self.reaper is not None:
            self.reaper.watch(popen.pid)  # its group: the command leads it
        return RunningCommand._spawned(self, request, popen, started_at, on_done, on_exit)

    def _spawn(
        self, request: RunRequest, cwd: str, env: dict[str, str], program: str | None
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(request.argv),
            executable=program,
            stdin=subprocess.DEVNULL if self._devnull is None else self._devnull,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=self.new_sessions,
            process_group=None if self.new_sessions else 0,
            close_fds=True,
            bufsize=0,
        )

    def refuse(
        self,
        request: RunRequest,
        reason: str,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> RunningCommand:
        """A run that never starts: status "error" with `reason`, reported like a start that
        failed (`on_exit`, then `on_done`, on another thread)."""
        return RunningCommand._failed(request, time.time(), reason, on_done, on_exit)


def _check_request(request: RunRequest) -> str | None:
    if not request.argv:
        return "empty command"
    if not all(isinstance(arg, str) for arg in request.argv):
        return "command arguments must be strings"
    if request.cwd is not None and not os.path.isabs(request.cwd):
        # A relative cwd would resolve against the daemon's working directory.
        return f"working directory must be an absolute path: {request.cwd!r}"
    timeout = request.timeout
    if timeout is not None and (math.isnan(timeout) or timeout < 0):
        return f"invalid timeout: {timeout!r}"
    return None


def _describe_start_error(exc: BaseException, argv0: str, cwd: str) -> str:
    if not isinstance(exc, OSError):
        return f"cannot start {argv0!r}: {exc}"
    reason = exc.strerror or str(exc)
    # subprocess names cwd as the filename when chdir() failed in the child.
    if exc.filename == cwd and argv0 != cwd:
        return f"bad working directory {cwd}: {reason}"
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return f"command not found: {argv0}"
    if isinstance(exc, PermissionError):
        return f"command not executable: {argv0}: {reason}"
    if exc.errno == errno.ENOEXEC:
        return f"cannot execute {argv0}: {reason} (a script without a #! line?)"
    return f"cannot start {argv0}: {reason}"


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


class RunningCommand:
    """One started (or failed-to-start) run. Create it with `CommandRunner.start()`."""

    pid: int | None
    started_at: float

    def __init__(self, request: RunRequest, started_at: float) -> None:
        self.request = request
        self.pid = None
        self.started_at = started_at
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._result: RunResult | None = None
        self._terminate_reason: str | None = None
        # guarded by _lock: tells the supervisor to look at this run; None once it ended
        self._poke: Callable[[], None] | None = None
        self._callbacks: list[Callable[[RunResult], None]] = []  # guarded by _lock
        self._on_exit: Callable[[], None] | None = None  # called once (guarded by _lock)

    @classmethod
    def _failed(
        cls,
        request: RunRequest,
        started_at: float,
        message: str,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> RunningCommand:
        run = cls(request, started_at)
        run._on_exit = on_exit
        log.warning(
            "job %s could not start: %s",
            request.job,
            message,
            extra={"event": "job-start-error", "job": request.job, "fire_key": request.fire_key},
        )
        run._finish(RunResult("error", None, started_at, started_at, error=message))
        if on_done is not None:
            # like a run's monitor would: on another thread than the caller's
            try:
                threading.Thread(target=run.on_done, args=(on_done,), daemon=True).start()
            except RuntimeError:  # no thread to be had: the caller's then
                run.on_done(on_done)
        return run

    @classmethod
    def _spawned(
        cls,
        runner: CommandRunner,
        request: RunRequest,
        popen: subprocess.Popen[bytes],
        started_at: float,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> RunningCommand:
        run = cls(request, started_at)
        run._on_exit = on_exit
        run.pid = popen.pid
        if on_done is not None:
            run._callbacks.append(on_done)
        monitor: _Monitor | None = None
        try:
            monitor = _Monitor(runner, run, popen, runner._supervisor)
            runner._supervisor.add(monitor)
        except Exception as exc:
            # Out of fds or threads: the command must not run unwatched.
            _kill_and_reap(popen)
            run._close_wake()
            if monitor is not None:
                monitor.close_fds()
            else:
                _close_popen_pipes(popen)
            error = f"cannot watch {request.argv[0]}: {exc}"
            run._finish(RunResult("error", None, started_at, time.time(), error=error))
        return run

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the run is over (the command exited, or timed out and was killed).

        With a timeout (e.g. for a bounded shutdown), raise TimeoutError if it is not over
        by then; the run carries on."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"job {self.request.job} still running after {timeout}s")
        assert self._result is not None
        return self._result

    def terminate(self, reason: str) -> None:
        """Kill the command's process group (SIGTERM, then SIGKILL after kill_grace); wait()
        then reports "terminated" with error=reason. Safe from any thread, any number of
        times; a no-op once the command has exited (its own status stands)."""
        with self._lock:
            if self._terminate_reason is not None or self._poke is None:
                return
            self._terminate_reason = reason
            poke = self._poke
        poke()

    # -- used by the monitor --------------------------------------------------------------

    def _pending_terminate(self) -> str | None:
        with self._lock:
            return self._terminate_reason

    def _close_wake(self) -> None:
        with self._lock:
            self._poke = None

    def on_done(self, callback: Callable[[RunResult], None]) -> None:
        """Call `callback(result)` once the run is over: from the run's monitor thread, or at
        once if it is over already. Lets a caller hand a run off instead of blocking on it."""
        with self._lock:
            if self._result is None:
                self._callbacks.append(callback)
                return
            result = self._result
        callback(result)

    def _ended(self) -> None:
        """The run is over (its result may still be in the making): call on_exit, once."""
        with self._lock:
            on_exit, self._on_exit = self._on_exit, None
        if on_exit is not None:
            try:
                on_exit()
            except Exception:
                log.exception("on_exit of job %s failed", self.request.job)

    def _finish(self, result: RunResult) -> None:
        self._ended()
        with self._lock:
            self._result = result
            callbacks, self._callbacks = self._callbacks, []
        self._done.set()
        for callback in callbacks:
            try:
                callback(result)
            except Exception:
                log.exception("completion of job %s failed", self.request.job)


class _OutputLog:
    """Splits a run's output into lines and logs them, within the run's byte budget.

    Both streams share one budget; each has its own partial-line buffer."""

    def __init__(self, logger: logging.Logger, request: RunRequest, limit: int) -> None:
        self.logger = logger
        self.job = request.job
        self.fire_key = request.fire_key
        self.remaining = limit
        self.limit = limit
        self.truncated = False
        self._partial: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        # A stream inside an over-long line whose head was logged already: skip to its end.
        self._skipping: dict[str, bool] = {"stdout": False, "stderr": False}

    def feed(self, stream: str, data: bytes) -> None:
        if self.truncated:
            return  # still read (the caller drains the pipe), no longer split or logged
        partial = self._partial[stream]
        start = 0
        while not self.truncated:
            newline = data.find(b"\n", start)
            if newline < 0:
                if not self._skipping[stream]:
                    partial += data[start:]
                    if len(partial) > MAX_LINE_BYTES:
                        self._emit(stream, bytes(partial[:MAX_LINE_BYTES]), cut=True)
                        partial.clear()
                        self._skipping[stream] = True
                return
            if self._skipping[stream]:
                self._skipping[stream] = False
            else:
                partial += data[start:newline]
                line = bytes(partial)
                partial.clear()
                if len(line) > MAX_LINE_BYTES:
                    self._emit(stream, line[:MAX_LINE_BYTES], cut=True)
                else:
                    self._emit(stream, line, cut=False)
            start = newline + 1

    def close(self, stream: str) -> None:
        """End of the stream: log a last line that had no newline."""
        partial = self._partial[stream]
        if partial and not self.truncated and not self._skipping[stream]:
            self._emit(stream, bytes(partial), cut=False)
        partial.clear()

    def _emit(self, stream: str, line: bytes, *, cut: bool) -> None:
        # The newline counts too, so that endless empty lines are bounded as well.
        cost = len(line) + 1
        if cost > self.remaining:
            if self.remaining > 1:
                # No " [line cut]" here: the truncation line right after says it.
                self._log(stream, line[: self.remaining - 1], cut=False)
            self.remaining = 0
            self.truncated = True
            self.logger.info(
                "output truncated: more than %d bytes; the rest is not logged",
                self.limit,
                extra={
                    "event": "job-output-truncated",
                    "job": self.job,
                    "fire_key": self.fire_key,
                    "stream": stream,
                },
            )
            return
        self.remaining -= cost
        self._log(stream, line, cut=cut)

    def _log(self, stream: str, line: bytes, *, cut: bool) -> None:
        text = line.decode("utf-8", errors="replace").removesuffix("\r")
        if cut:
            text += " [line cut]"
        self.logger.info(
            "%s",
            text,
            extra={
                "event": "job-output",
                "job": self.job,
                "fire_key": self.fire_key,
                "stream": stream,
            },
        )


class _Supervisor:
    """The thread that watches every run of one runner (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._new: list[_Monitor] = []
        self._poked: set[_Monitor] = set()
        # a wake-up is on its way and the supervisor has not taken the new runs yet: one
        # wake-up serves every run added meanwhile (a burst adds hundreds at once)
        self._wake_pending = False
        self._thread: threading.Thread | None = None
        self._done: queue.SimpleQueue[_Monitor] = queue.SimpleQueue()
        self._done_thread: threading.Thread | None = None
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._poller = select.poll()
        self._owner: dict[int, _Monitor] = {}  # descriptor -> its run (supervisor thread only)

    def add(self, monitor: _Monitor) -> None:
        """Start watching a run. Raises when the threads cannot be started."""
        monitor.run_._poke = lambda: self.poke(monitor)
        with self._lock:
            if self._wake_w is None:
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_r, False)
                os.set_blocking(self._wake_w, False)
                self._poller.register(self._wake_r, select.POLLIN)
            if self._done_thread is None:
                done = threading.Thread(target=self._complete, name="zksched-done", daemon=True)
                done.start()
                self._done_thread = done
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="zksched-runs", daemon=True)
                thread.start()
                self._thread = thread
            self._new.append(monitor)
            wake, self._wake_pending = not self._wake_pending, True
        if wake:
            self._wake()

    def poke(self, monitor: _Monitor) -> None:
        """Look at this run now (it was asked to terminate)."""
        with self._lock:
            self._poked.add(monitor)
            wake, self._wake_pending = not self._wake_pending, True
        if wake:
            self._wake()

    def unregister(self, fd: int) -> None:
        """Stop polling a descriptor of a run (supervisor thread only)."""
        if self._owner.pop(fd, None) is not None:
            self._poller.unregister(fd)

    def _wake(self) -> None:
        if self._wake_w is not None:
            # BlockingIOError: the pipe is full of wake-ups already.
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"w")

    def _run(self) -> None:
        timers: list[tuple[float, int, _Monitor]] = []
        order = itertools.count()
        ready: set[_Monitor] = set()
        while True:
            try:
                ready = self._turn(timers, order, ready)
            except Exception:  # never die: every running command depends on this thread
                log.exception("the run supervisor failed; carrying on")
                time.sleep(0.1)

    def _turn(
        self,
        timers: list[tuple[float, int, _Monitor]],
        order: Iterator[int],
        ready: set[_Monitor],
    ) -> set[_Monitor]:
        """One round: take new runs in, advance the ones that are due, wait for events;
        returns the runs to advance next round."""
        with self._lock:
            new, self._new = self._new, []
            ready |= self._poked
            self._poked = set()
            self._wake_pending = False
        for monitor in new:
            try:
                for fd in monitor.fds():
                    self._owner[fd] = monitor
                    self._poller.register(fd, select.POLLIN)
            except Exception as exc:  # a descriptor it cannot poll: ends as "error"
                monitor.error = exc
            ready.add(monitor)
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            at, _, due = heapq.heappop(timers)
            if due.timer == at:
                due.timer = None
            ready.add(due)
        for monitor in ready:
            if monitor.over:
                continue
            if monitor.error is not None:
                monitor.over = True
                finished, wake_at = True, None
            else:
                finished, wake_at = monitor.advance(now)
            if finished:
                for fd in monitor.fds():
                    self.unregister(fd)
                monitor.run_._ended()
                self._done.put(monitor)
            elif wake_at is not None and wake_at != monitor.timer:
                monitor.timer = wake_at
                heapq.heappush(timers, (wake_at, next(order), monitor))
        if len(timers) > 2 * len(self._owner) + 256:
            # wake-ups of runs that are over (a timeout hours away, say): drop them
            timers[:] = [t for t in timers if not t[2].over]
            heapq.heapify(timers)
        ready = set()
        wait_ms = None
        if timers:
            wait_ms = max(0, math.ceil((timers[0][0] - time.monotonic()) * 1000))
        for fd, _events in self._poller.poll(wait_ms):
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(fd, 4096)
                continue
            monitor_ = self._owner.get(fd)
            if monitor_ is not None:
                monitor_.readable(fd)
                ready.add(monitor_)
        return ready

    def _complete(self) -> None:
        while True:
            monitor = self._done.get()
            try:
                monitor.complete()
            except Exception:  # never die: later runs' results depend on this thread
                log.exception("completing job %s failed", monitor.request.job)


class _Monitor:
    """One run's state machine: reads output, watches the exit, enforces deadlines, kills.
    Advanced by the supervisor thread only."""

    def __init__(
        self,
        runner: CommandRunner,
        run: RunningCommand,
        popen: subprocess.Popen[bytes],
        supervisor: _Supervisor,
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
