"""Running one job command: `CommandRunner` spawns it and hands it to be watched.

The daemon's fire path calls `CommandRunner.start()` once it has claimed a fire, then
`RunningCommand.wait()` for the result; another thread may call `terminate()` at any time
(e.g. when the ZooKeeper session is lost). The parts of a run, each in its module:

- `runtypes.py`: what a run is asked and answers (`RunRequest`, `RunResult`: exit codes,
  statuses);
- `runhandle.py`: the handle a caller holds (`RunningCommand`);
- `monitor.py`: one run's state machine: output, exit, deadlines, kills of its group;
- `outputlog.py`: what of the output is logged;
- `supervisor.py`: the threads that drive every run and deliver the results.

This module owns the start:

- **No shell.** ``argv`` is exec'd as is; ``argv[0]`` without a slash is looked up in the
  *child's* ``PATH`` (once for commands started together: `ProgramLookup`).
- **Environment.** The child gets ``base_env`` merged with ``request.env`` (the request wins),
  never the daemon's own environment: that holds secrets such as ``ZKSCHED_AUTH``. The
  default ``base_env`` is `default_base_env()`: ``PATH`` (the daemon's, else
  ``/usr/local/bin:/usr/bin:/bin``), and ``LANG``, ``HOME``, ``TZ`` when the daemon has them.
  stdin is ``/dev/null``; the working directory is ``request.cwd`` or ``/``.
- **Process group.** Each command leads a new process group, which holds the command and
  everything it starts (a timeout or `terminate()` stops the whole group: `monitor.py`).
  It stays in the daemon's session: on Linux with autogroup scheduling
  (where no cgroup does it) each session is one scheduling group, and commands started as
  sessions of their own each got as much CPU as the whole daemon, so a burst of them
  starved the daemon's own threads (and every other session on the host). Except when the
  daemon has a controlling terminal (run by hand, `docker run -t`, tmux): then each command
  gets a session of its own, so that it cannot reach that terminal (a prompt fails at once
  instead of waiting for an operator, or stopping the command).
- **Errors.** A bad request or a command that cannot start is a run with status
  ``error`` (`start()` never raises for it).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from zksched.runtime.run.handle import RunningCommand
from zksched.runtime.run.monitor import _close_popen_pipes, _kill_and_reap, _Monitor
from zksched.runtime.run.output import MAX_LINE_BYTES
from zksched.runtime.run.reaper import TAG_VARIABLE, Reaper
from zksched.runtime.run.request import RunRequest, RunResult, RunStatus
from zksched.runtime.run.supervisor import _Supervisor

__all__ = [
    "DEFAULT_PATH",
    "MAX_LINE_BYTES",
    "CommandRunner",
    "RunRequest",
    "RunResult",
    "RunStatus",
    "Runner",
    "RunningCommand",
    "StartedRun",
    "default_base_env",
]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


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


class StartedRun(Protocol):
    """A run under way (`RunningCommand`, `FunctionRun`), as its starter holds it."""

    def terminate(self, reason: str) -> None: ...


class Runner(Protocol):
    """What starts commands for the fire shell: `CommandRunner` (the cluster simulator has a
    process table of its own). `on_done` gets the run's result once it is over."""

    def start(
        self,
        request: RunRequest,
        on_done: Callable[[RunResult], None] | None = None,
        on_exit: Callable[[], None] | None = None,
        programs: ProgramLookup | None = None,
    ) -> StartedRun: ...


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
        if self.reaper is not None:  # found by it even if the daemon dies before `watch`
            env[TAG_VARIABLE] = self.reaper.tag
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
        return self._watch(request, popen, started_at, on_done, on_exit)

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

    def _watch(
        self,
        request: RunRequest,
        popen: subprocess.Popen[bytes],
        started_at: float,
        on_done: Callable[[RunResult], None] | None,
        on_exit: Callable[[], None] | None,
    ) -> RunningCommand:
        """The handle of a spawned command, whose monitor the supervisor now drives."""
        run = RunningCommand._spawned(request, popen.pid, started_at, on_done, on_exit)
        monitor: _Monitor | None = None
        try:
            monitor = _Monitor(self, run, popen, self._supervisor)
            self._supervisor.add(monitor)
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
