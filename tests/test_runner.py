"""The command runner (zksched/runtime/run/runner.py and the run modules beside it: runhandle,
monitor, outputlog, supervisor), against real subprocesses.

No ZooKeeper here. Timing bounds are deliberately loose: the machine is shared and noisy;
what is asserted is what happened (status, exit code, which processes are left), not speed.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.runtime.run.output import _OutputLog
from zksched.runtime.run.runner import (
    DEFAULT_PATH,
    MAX_LINE_BYTES,
    CommandRunner,
    ProgramLookup,
    RunningCommand,
    RunRequest,
    RunResult,
    default_base_env,
)

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
]

PY = sys.executable
SYS_PATH = os.environ.get("PATH") or DEFAULT_PATH
LOGGER = "test.zksched.job"


def request(*argv: str, **kwargs: object) -> RunRequest:
    env = kwargs.pop("env", {})
    return RunRequest("backup", "backup@2026-01-02T02:00:00Z", tuple(argv), env, **kwargs)  # type: ignore[arg-type]


def runner(**kwargs: object) -> CommandRunner:
    kwargs.setdefault("logger", logging.getLogger(LOGGER))
    kwargs.setdefault("base_env", {"PATH": SYS_PATH})
    return CommandRunner(**kwargs)  # type: ignore[arg-type]


def run(*argv: str, runner_kwargs: dict[str, object] | None = None, **kwargs: object) -> RunResult:
    return runner(**(runner_kwargs or {})).start(request(*argv, **kwargs)).wait(timeout=30)


def output(caplog: pytest.LogCaptureFixture, stream: str | None = None) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER
        and getattr(r, "event", None) == "job-output"
        and stream in (None, getattr(r, "stream", None))
    ]


@pytest.fixture(autouse=True)
def _capture_job_output(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)


def running(pid: int) -> bool:
    """Alive and not a zombie (orphaned zombies may never be reaped in a container)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return data[data.rfind(b")") + 2 :].split(b" ", 1)[0] not in (b"Z", b"X")


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def read_pid(path: Path, within: float = 10.0) -> int:
    deadline = time.monotonic() + within
    while True:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return int(text)
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.01)


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where a test command writes a grandchild's pid; whatever survives a failed test is
    killed by that pid."""
    path = tmp_path / "grandchild.pid"
    yield path
    text = path.read_text() if path.exists() else ""
    if text.endswith("\n") and running(int(text)):
        os.kill(int(text), signal.SIGKILL)


# -- exit status ------------------------------------------------------------------------------


def test_exit_zero_is_ok() -> None:
    r = runner()
    before = time.time()
    cmd = r.start(request("true"))
    result = cmd.wait()
    assert result == RunResult("ok", 0, cmd.started_at, result.finished_at)
    assert isinstance(cmd.pid, int) and cmd.pid > 0
    assert before <= result.started_at <= result.finished_at <= time.time()
    assert cmd.done
    assert cmd.wait() is result  # the result stays


@pytest.mark.parametrize("code", [1, 3, 255])
def test_nonzero_exit_is_failed(code: int) -> None:
    result = run("sh", "-c", f"exit {code}")
    assert (result.status, result.exit_code) == ("failed", code)
    assert result.error == f"exited with code {code}"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGUSR1, signal.SIGTERM])
def test_killed_by_a_signal_not_ours_is_failed(sig: signal.Signals) -> None:
    result = run("sh", "-c", f"kill -{sig.name.removeprefix('SIG')} $$")
    assert (result.status, result.exit_code) == ("failed", -sig)
    assert result.error == f"killed by {sig.name} ({int(sig)})"


# -- argv, environment, cwd -------------------------------------------------------------------


def test_argv_is_not_interpreted_by_a_shell(caplog: pytest.LogCaptureFixture) -> None:
    result = run("echo", "$HOME; rm -rf /", "*", "`id`", "a  b")
    assert result.status == "ok"
    assert output(caplog) == ["$HOME; rm -rf / * `id` a  b"]


def env_of(caplog: pytest.LogCaptureFixture, cmd: RunningCommand) -> dict[str, str]:
    assert cmd.wait().status == "ok"
    return dict(line.split("=", 1) for line in output(caplog))


def test_default_env_is_minimal_and_request_wins(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZKSCHED_AUTH", "admin:secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hush")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("HOME", "/home/daemon")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    r = CommandRunner(logger=logging.getLogger(LOGGER))
    env = {"ZKSCHED_JOB": "backup", "BACKUP_LEVEL": "full", "HOME": "/srv/backup"}
    cmd = r.start(request("env", env=env))
    assert env_of(caplog, cmd) == {
        "PATH": SYS_PATH,
        "LANG": "C.UTF-8",
        "TZ": "Europe/Berlin",
        "HOME": "/srv/backup",  # the request overrides the base
        "ZKSCHED_JOB": "backup",
        "BACKUP_LEVEL": "full",
    }


def test_default_base_env() -> None:
    assert default_base_env({}) == {"PATH": DEFAULT_PATH}
    assert default_base_env({"PATH": ""}) == {"PATH": DEFAULT_PATH}
    daemon_env = {"PATH": "/opt/bin", "HOME": "/root", "ZKSCHED_AUTH": "u:p", "USER": "root"}
    assert default_base_env(daemon_env) == {"PATH": "/opt/bin", "HOME": "/root"}


def test_explicit_base_env_is_exactly_what_the_child_gets(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZKSCHED_AUTH", "admin:secret")
    r = runner(base_env={"PATH": SYS_PATH, "A": "base", "B": "base"})
    cmd = r.start(request("env", env={"B": "request", "C": "request"}))
    assert env_of(caplog, cmd) == {"PATH": SYS_PATH, "A": "base", "B": "request", "C": "request"}


def test_command_is_looked_up_in_the_childs_path(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    script = tmp_path / "nightly-job"
    script.write_text("#!/bin/sh\necho ran from $0\n")
    script.chmod(0o755)
    result = run("nightly-job", env={"PATH": f"{tmp_path}:{SYS_PATH}"})
    assert result.status == "ok"
    assert output(caplog) == [f"ran from {script}"]


def test_cwd_defaults_to_root_not_the_daemons(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(PY, "-c", "import os; print(os.getcwd())").status == "ok"
    assert output(caplog) == ["/"]


def test_explicit_cwd(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    result = run(PY, "-c", "import os; print(os.getcwd())", cwd=str(tmp_path))
    assert result.status == "ok"
    assert output(caplog) == [os.path.realpath(tmp_path)]


def test_stdin_is_dev_null(caplog: pytest.LogCaptureFixture) -> None:
    # A command reading stdin must see EOF at once, not hang on the daemon's stdin.
    assert run("sh", "-c", "cat; echo eof; readlink /proc/self/fd/0").status == "ok"
    assert output(caplog) == ["eof", "/dev/null"]


# -- commands that cannot start ---------------------------------------------------------------


def assert_error(cmd: RunningCommand, message: str) -> None:
    assert cmd.done and cmd.pid is None
    result = cmd.wait()
    assert (result.status, result.exit_code, result.error) == ("error", None, message)
    assert result.started_at == result.finished_at == cmd.started_at


def test_command_not_found() -> None:
    r = runner()
    assert_error(
        r.start(request("/usr/bin/zksched-no-such-command")),
        "command not found: /usr/bin/zksched-no-such-command",
    )
    assert_error(
        r.start(request("zksched-no-such-command")), "command not found: zksched-no-such-command"
    )


def test_command_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    cmd = runner().start(request(str(script)))
    assert cmd.wait().status == "error"
    if os.geteuid() != 0 or not os.access(script, os.X_OK):
        assert cmd.wait().error == f"command not executable: {script}: Permission denied"


def test_bad_cwd(tmp_path: Path) -> None:
    r = runner()
    missing = str(tmp_path / "missing")
    assert_error(
        r.start(request("true", cwd=missing)),
        f"bad working directory {missing}: No such file or directory",
    )
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert_error(
        r.start(request("true", cwd=str(a_file))),
        f"bad working directory {a_file}: Not a directory",
    )


@pytest.mark.parametrize(
    ("argv", "kwargs", "message"),
    [
        ((), {}, "empty command"),
        (("true",), {"cwd": "relative/dir"}, "working directory must be an absolute path"),
        (("true",), {"timeout": -1.0}, "invalid timeout"),
        (("true",), {"timeout": math.nan}, "invalid timeout"),
        (("echo", "a\0b"), {}, "embedded null byte"),
        (("true",), {"env": {"A=B": "x"}}, "illegal environment variable name"),
        (("true",), {"env": {"A": 1}}, "cannot start"),
    ],
)
def test_bad_requests_are_errors_not_exceptions(
    argv: tuple[str, ...], kwargs: dict[str, object], message: str
) -> None:
    result = runner().start(request(*argv, **kwargs)).wait()
    assert result.status == "error" and result.exit_code is None
    assert result.error is not None and message in result.error


def test_infinite_timeout_means_no_limit() -> None:
    assert run("true", timeout=math.inf).status == "ok"


# -- timeout and terminate kill the whole process group ---------------------------------------

GRANDCHILD = "sleep 300 & echo $! > {pidfile}; wait"


def test_timeout_kills_the_group_including_grandchild(pidfile: Path) -> None:
    r = runner(kill_grace=5.0)
    t0 = time.monotonic()
    result = r.start(request("sh", "-c", GRANDCHILD.format(pidfile=pidfile), timeout=0.5)).wait()
    elapsed = time.monotonic() - t0
    assert (result.status, result.exit_code) == ("timeout", -signal.SIGTERM)
    assert result.error == "timed out after 0.5s"
    assert 0.5 <= elapsed < 4.5  # SIGTERM sufficed: no wait for the grace period
    assert gone(read_pid(pidfile))


def test_timeout_escalates_to_sigkill_after_grace(pidfile: Path) -> None:
    # Both the shell and its background sleep ignore SIGTERM ('' traps are inherited).
    script = "trap '' TERM; " + GRANDCHILD.format(pidfile=pidfile)
    t0 = time.monotonic()
    result = run("sh", "-c", script, timeout=0.5, runner_kwargs={"kill_grace": 0.5})
    elapsed = time.monotonic() - t0
    assert (result.status, result.exit_code) == ("timeout", -signal.SIGKILL)
    assert elapsed >= 1.0
    assert gone(read_pid(pidfile))


def test_timeout_keeps_the_status_a_command_exits_with_on_sigterm(pidfile: Path) -> None:
    script = "trap 'exit 0' TERM; " + GRANDCHILD.format(pidfile=pidfile)
    result = run("sh", "-c", script, timeout=0.5)
    assert (result.status, result.exit_code, result.error) == ("timeout", 0, "timed out after 0.5s")
    assert gone(read_pid(pidfile))


def test_a_stopped_command_is_continued_to_act_on_sigterm() -> None:
    # stopped (SIGSTOP; a job-control stop likewise), it could not run its TERM trap and
    # would wait for SIGKILL after the whole grace period
    script = "trap 'exit 3' TERM; kill -STOP $$; sleep 300"
    t0 = time.monotonic()
    result = run("sh", "-c", script, timeout=0.5, runner_kwargs={"kill_grace": 10.0})
    assert (result.status, result.exit_code) == ("timeout", 3)
    assert time.monotonic() - t0 < 8.0


def test_terminate_from_another_thread_kills_the_group(pidfile: Path) -> None:
    cmd = runner().start(request("sh", "-c", GRANDCHILD.format(pidfile=pidfile)))
    grandchild = read_pid(pidfile)
    with pytest.raises(TimeoutError):
        cmd.wait(timeout=0.05)
    assert not cmd.done
    killer = threading.Thread(target=cmd.terminate, args=("ZooKeeper session lost",))
    killer.start()
    result = cmd.wait(timeout=10)
    killer.join()
    assert (result.status, result.exit_code) == ("terminated", -signal.SIGTERM)
    assert result.error == "ZooKeeper session lost"
    assert gone(grandchild)
    cmd.terminate("again")  # after the end: a no-op
    assert cmd.wait() is result


def test_first_terminate_reason_wins(pidfile: Path) -> None:
    cmd = runner().start(request("sh", "-c", GRANDCHILD.format(pidfile=pidfile)))
    read_pid(pidfile)
    cmd.terminate("first")
    cmd.terminate("second")
    assert (cmd.wait(timeout=10).status, cmd.wait().error) == ("terminated", "first")


def test_terminate_after_exit_changes_nothing() -> None:
    cmd = runner().start(request("sh", "-c", "exit 4"))
    result = cmd.wait()
    cmd.terminate("too late")
    assert cmd.wait() is result
    assert (result.status, result.error) == ("failed", "exited with code 4")


def test_terminate_on_a_command_that_never_started_is_harmless() -> None:
    cmd = runner().start(request("/nonexistent/cmd"))
    cmd.terminate("session lost")
    assert cmd.wait().status == "error"


def _terminate_at_barrier(
    cmd: RunningCommand, reason: str, barrier: threading.Barrier, delay: float
) -> None:
    barrier.wait()
    time.sleep(delay)
    cmd.terminate(reason)


def test_terminate_racing_with_exit_is_harmless() -> None:
    r = runner()
    for i in range(40):
        cmd = r.start(request("true"))
        reasons = [f"lost-{i}-{k}" for k in range(3)]
        barrier = threading.Barrier(len(reasons))
        delay = (i % 4) * 0.0005  # from "before the exec" to "after the exit"
        if i % 5 == 0:
            cmd.terminate(reasons[0])  # straight after the spawn, before the threads
        threads = [
            threading.Thread(target=_terminate_at_barrier, args=(cmd, reason, barrier, delay))
            for reason in reasons
        ]
        for t in threads:
            t.start()
        result = cmd.wait(timeout=10)
        for t in threads:
            t.join()
        if result.status == "ok":
            assert (result.exit_code, result.error) == (0, None)
        else:
            assert result.status == "terminated"
            assert result.error in reasons
            assert result.exit_code in (0, -signal.SIGTERM)
        assert cmd.wait() is result


# -- what a command leaves behind -------------------------------------------------------------


def test_processes_left_in_the_group_are_stopped_when_the_command_exits(
    pidfile: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zksched.runtime.run.runner")
    t0 = time.monotonic()
    # The background sleep keeps stdout open: without stopping it, wait() would hang.
    result = run("sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo started")
    assert (result.status, result.exit_code) == ("ok", 0)
    assert time.monotonic() - t0 < 4.0
    assert gone(read_pid(pidfile), within=0.5)  # already gone when wait() returned
    assert output(caplog) == ["started"]
    assert any(getattr(r, "event", None) == "job-leftovers" for r in caplog.records)


def test_a_process_that_left_the_process_group_cannot_hold_wait_forever(tmp_path: Path) -> None:
    escaped = tmp_path / "escaped.pid"
    # setsid: the sleep leaves the process group but keeps our stdout open.
    script = (
        f"setsid sh -c 'echo $$ > {escaped}; exec sleep 300' & "
        f"while [ ! -s {escaped} ]; do sleep 0.01; done; echo bye"
    )
    t0 = time.monotonic()
    try:
        result = run("sh", "-c", script, runner_kwargs={"output_drain": 0.3})
        assert (result.status, result.exit_code) == ("ok", 0)
        assert time.monotonic() - t0 < 5.0
    finally:
        pid = read_pid(escaped)
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_command_leads_its_own_process_group_inside_the_daemons_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Not a session of its own: with autogroup scheduling (Linux, where no cgroup does it)
    # every session is one scheduling group, and 2,000 commands as 2,000 sessions each got as
    # much CPU as the daemon, which then could not start the rest of its burst.
    r = runner()
    command = r.start(request("sh", "-c", "cat /proc/$$/stat"))
    command.wait(timeout=30)
    pid = command.pid
    assert pid is not None
    # /proc/<pid>/stat: "pid (comm) state ppid pgrp session ..."
    head, _, tail = output(caplog)[0].rpartition(")")
    pgrp, session = tail.split()[2:4]
    assert head.split()[0] == str(pid)
    assert pgrp == str(pid), "its own process group"
    if r.new_sessions:  # pytest run from a terminal: kept away from it
        assert session == str(pid)
    else:
        assert session == str(os.getsid(0)), "the daemon's session"


def test_with_a_terminal_each_command_gets_a_session_of_its_own(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_open = os.open

    def tty_opens(path: str, flags: int, *args: object) -> int:
        return real_open(os.devnull if path == "/dev/tty" else path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", tty_opens)
    r = runner()
    monkeypatch.undo()
    assert r.new_sessions
    command = r.start(request("sh", "-c", "cat /proc/$$/stat"))
    command.wait(timeout=30)
    pgrp, session = output(caplog)[0].rpartition(")")[2].split()[2:4]
    assert pgrp == session == str(command.pid)


# -- looking a program up once for many starts ------------------------------------------------


def executable(path: Path, mode: int = 0o755, script: str = "exit 0") -> Path:
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(mode)
    return path


def test_program_lookup_finds_what_execvp_would_run(tmp_path: Path) -> None:
    first, second, third = (tmp_path / n for n in ("a", "b", "c"))
    for folder in (first, second, third):
        folder.mkdir()
    (first / "tool").mkdir()  # a directory is skipped, as execvp skips it
    executable(second / "tool", 0o644)  # not executable: skipped too
    found = executable(third / "tool")
    path = os.pathsep.join(str(f) for f in (tmp_path / "missing", first, second, third))
    lookup = ProgramLookup()
    assert lookup.find("tool", path) == str(found)
    assert lookup.find("nothing-here", path) is None  # the start looks it up and says so
    assert lookup.find("./tool", path) is None  # a slash: exec'd as given
    assert lookup.find("tool", f"relative:{third}") is None  # depends on the cwd: not ours
    assert lookup.find("tool", f":{third}") is None  # an empty entry is the cwd too
    assert lookup.find("tool", str(second)) is None


def test_program_lookup_is_per_path_and_remembers_within_its_batch(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    in_one, in_two = executable(one / "tool"), executable(two / "tool")
    lookup = ProgramLookup()
    assert lookup.find("tool", f"{one}:{two}") == str(in_one)
    assert lookup.find("tool", f"{two}:{one}") == str(in_two)  # a job's own PATH counts
    in_one.unlink()
    assert lookup.find("tool", f"{one}:{two}") == str(in_one)  # one batch: looked up once
    assert ProgramLookup().find("tool", f"{one}:{two}") == str(in_two)  # the next batch


def test_commands_started_together_run_what_the_lookup_found(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    executable(one / "tool", script='echo "one as $0"')
    programs = ProgramLookup()
    path = f"{one}:{two}:{SYS_PATH}"
    first = runner().start(request("tool", env={"PATH": path}), programs=programs).wait(30)
    assert (first.status, first.exit_code) == ("ok", 0)
    # what the batch found is moved away: the start looks the program up again (as execvp)
    executable(two / "tool", script="echo two")
    (one / "tool").rename(tmp_path / "moved")
    second = runner().start(request("tool", env={"PATH": path}), programs=programs).wait(30)
    assert (second.status, second.exit_code) == ("ok", 0)
    assert output(caplog) == [f"one as {one / 'tool'}", "two"]


def test_a_program_gone_from_every_folder_is_reported_not_found(tmp_path: Path) -> None:
    programs = ProgramLookup()
    tool = executable(tmp_path / "tool")
    assert programs.find("tool", str(tmp_path)) == str(tool)
    tool.unlink()
    result = runner().start(request("tool", env={"PATH": str(tmp_path)}), programs=programs)
    outcome = result.wait(30)
    assert (outcome.status, outcome.exit_code) == ("error", None)
    assert outcome.error == "command not found: tool"


# -- degraded environments --------------------------------------------------------------------


def test_without_pidfd_the_exit_is_polled_for(
    monkeypatch: pytest.MonkeyPatch, pidfile: Path
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    assert run("sh", "-c", "exit 7").exit_code == 7
    result = run("sh", "-c", GRANDCHILD.format(pidfile=pidfile), timeout=0.3)
    assert (result.status, result.exit_code) == ("timeout", -signal.SIGTERM)
    assert gone(read_pid(pidfile))


def test_a_command_that_cannot_be_watched_is_killed_not_left_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_threads(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_threads)
    cmd = runner().start(request("sleep", "300"))
    monkeypatch.undo()
    result = cmd.wait()
    assert (result.status, result.exit_code) == ("error", None)
    assert result.error == "cannot watch sleep: can't start new thread"
    assert cmd.pid is not None and not running(cmd.pid)


def test_runs_leak_no_fds_or_threads(tmp_path: Path) -> None:
    # The daemon runs jobs for months: every path must close its pipes and end its thread.
    r = runner(kill_grace=0.2)
    requests = [
        request("true"),
        request("sh", "-c", "echo out; echo err >&2; exit 1"),
        request("sleep", "30", timeout=0.05),
        request("/nonexistent"),
        request("true", cwd=str(tmp_path / "missing")),
    ]
    r.start(request("true")).wait()  # warm up anything created once
    fds_before = len(os.listdir("/proc/self/fd"))
    threads_before = threading.active_count()
    for _ in range(3):
        for req in requests:
            r.start(req).wait(timeout=10)
        terminated = r.start(request("sleep", "30"))
        terminated.terminate("test")
        assert terminated.wait(timeout=10).status == "terminated"
    deadline = time.monotonic() + 5
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.01)  # a monitor thread sets the result just before it returns
    assert threading.active_count() == threads_before
    assert len(os.listdir("/proc/self/fd")) == fds_before


# -- output ------------------------------------------------------------------------------------


def test_output_is_logged_line_by_line_with_extras(caplog: pytest.LogCaptureFixture) -> None:
    script = "echo out1; echo err1 >&2; echo; echo out2; printf 'crlf\\r\\n'; printf no-newline"
    result = run("sh", "-c", script)
    assert result.status == "ok" and not result.output_truncated
    records = [r for r in caplog.records if r.name == LOGGER]
    for r in records:
        assert r.levelno == logging.INFO
        assert r.event == "job-output"  # type: ignore[attr-defined]
        assert r.job == "backup"  # type: ignore[attr-defined]
        assert r.fire_key == "backup@2026-01-02T02:00:00Z"  # type: ignore[attr-defined]
    assert output(caplog, "stdout") == ["out1", "", "out2", "crlf", "no-newline"]
    assert output(caplog, "stderr") == ["err1"]
    assert len(records) == 6


def test_default_logger_is_zksched_job(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="zksched.job")
    r = CommandRunner(base_env={"PATH": SYS_PATH})
    assert r.start(request("echo", "hello")).wait().status == "ok"
    [record] = [r for r in caplog.records if r.name == "zksched.job"]
    assert record.getMessage() == "hello" and record.stream == "stdout"  # type: ignore[attr-defined]


def test_undecodable_bytes_are_replaced(caplog: pytest.LogCaptureFixture) -> None:
    assert run("printf", "\\377ok\\n").status == "ok"
    assert output(caplog) == ["\ufffdok"]


def test_long_lines_are_cut(caplog: pytest.LogCaptureFixture) -> None:
    code = "import sys; sys.stdout.write('a' * 10000 + '\\n' + 'b' * 5000 + '\\nafter\\n')"
    assert run(PY, "-c", code).status == "ok"
    assert output(caplog) == [
        "a" * MAX_LINE_BYTES + " [line cut]",
        "b" * MAX_LINE_BYTES + " [line cut]",
        "after",
    ]


def test_output_is_bounded_and_truncation_flagged(caplog: pytest.LogCaptureFixture) -> None:
    result = run(
        "sh",
        "-c",
        "for i in $(seq 100); do echo line-$i; done; echo done >&2",
        runner_kwargs={"max_output_bytes": 100},
    )
    assert result.status == "ok" and result.output_truncated
    lines = output(caplog)
    assert sum(len(line) + 1 for line in lines) <= 100
    assert lines[:3] == ["line-1", "line-2", "line-3"]
    [marker] = [r for r in caplog.records if getattr(r, "event", None) == "job-output-truncated"]
    assert marker.levelno == logging.INFO and marker.job == "backup"  # type: ignore[attr-defined]
    assert "output truncated" in marker.getMessage()


def test_endless_empty_lines_are_bounded_too(caplog: pytest.LogCaptureFixture) -> None:
    result = run("sh", "-c", "yes '' | head -n 100000", runner_kwargs={"max_output_bytes": 50})
    assert result.status == "ok" and result.output_truncated
    assert output(caplog) == [""] * 50


def test_several_megabytes_of_output_do_not_block_the_child(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 8 MiB on each stream, interleaved: a runner that stopped reading either pipe would
    # leave the child blocked on a full pipe until the timeout.
    code = (
        "import sys\n"
        "line = b'x' * 1023 + b'\\n'\n"
        "for _ in range(8192):\n"
        "    sys.stdout.buffer.write(line)\n"
        "    sys.stderr.buffer.write(line)\n"
        "sys.stdout.buffer.write(b'last\\n')\n"
    )
    result = run(PY, "-c", code, timeout=60, runner_kwargs={"max_output_bytes": 64 * 1024})
    assert (result.status, result.exit_code) == ("ok", 0)
    assert result.output_truncated
    assert sum(len(line) + 1 for line in output(caplog)) <= 64 * 1024


# -- the line splitter, whatever the chunking --------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((getattr(record, "stream", "?"), record.getMessage()))


def _logged(chunks: list[tuple[str, bytes]], limit: int) -> tuple[list[tuple[str, str]], bool]:
    logger = logging.getLogger("test.zksched.splitter")
    logger.propagate = False
    handler = _Collect()
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    out = _OutputLog(logger, request("x"), limit)
    for stream, data in chunks:
        out.feed(stream, data)
    out.close("stdout")
    out.close("stderr")
    return handler.lines, out.truncated


@settings(max_examples=150, deadline=None)
@given(
    data=st.binary(max_size=12000).map(lambda b: b.replace(b"\x00", b"\n")),
    cuts=st.lists(st.integers(min_value=0, max_value=12000), max_size=8),
    limit=st.sampled_from([0, 10, 5000, 64 * 1024]),
)
def test_lines_do_not_depend_on_how_reads_split_the_output(
    data: bytes, cuts: list[int], limit: int
) -> None:
    points = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = [("stdout", data[a:b]) for a, b in itertools.pairwise(points)]
    assert _logged(chunks, limit) == _logged([("stdout", data)], limit)
    lines, truncated = _logged(chunks, limit)
    text_lines = [text for _, text in lines]
    if not truncated:
        expected = data.split(b"\n")
        if expected[-1] == b"":
            expected.pop()
        assert len(text_lines) == len(expected)
    assert len(lines) <= limit + 1  # each logged line costs at least its newline


@pytest.mark.parametrize("argv", [("true",), ("/nonexistent/command",)])
def test_on_done_given_to_start_runs_once_and_never_on_the_callers_thread(
    argv: tuple[str, ...],
) -> None:
    # The fire path hands a run off at start: a quick command (or one that cannot start)
    # must not make the caller record its result before start() has even returned.
    seen: list[tuple[int, RunResult]] = []
    done = threading.Event()

    def on_done(result: RunResult) -> None:
        seen.append((threading.get_ident(), result))
        done.set()

    cmd = runner().start(request(*argv), on_done)
    assert done.wait(10)
    assert cmd.wait(10) is seen[0][1]
    assert len(seen) == 1 and seen[0][0] != threading.get_ident()


def test_close_gives_back_dev_null_and_a_later_start_still_works() -> None:
    r = runner()
    r.close()
    r.close()  # twice is harmless
    assert r._devnull is None
    assert r.start(request("true")).wait().status == "ok"
