"""The reaper takes a dead daemon's commands with it, even one it was never told of."""

from __future__ import annotations

import os
import subprocess
import time

from zksched.runtime.run.reaper import TAG_VARIABLE, Reaper


def gone(popen: subprocess.Popen[bytes], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            return True
        time.sleep(0.02)
    return False


def test_a_command_started_before_the_daemon_could_list_it_is_stopped_too() -> None:
    """Regression (busy suite): the daemon was killed between a command's start and its
    `+<pgid>` line; the command outlived its member. Its tagged environment gives it away."""
    reaper = Reaper(grace=0.5)
    reaper.start()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    listed = subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
    unlisted = subprocess.Popen(
        ["sleep", "30"], env={**env, TAG_VARIABLE: reaper.tag}, start_new_session=True
    )
    stranger = subprocess.Popen(
        ["sleep", "30"], env={**env, TAG_VARIABLE: "another daemon's"}, start_new_session=True
    )
    try:
        reaper.watch(listed.pid)
        reaper.close()  # the pipe closes, as when the daemon dies
        assert gone(listed, 5) and gone(unlisted, 5)
        assert stranger.poll() is None  # not ours
    finally:
        for popen in (listed, unlisted, stranger):
            popen.kill()
            popen.wait()


def test_the_grace_can_be_shortened_once_the_session_timeout_is_known() -> None:
    reaper = Reaper(grace=30.0)  # a quarter of the session asked for
    reaper.start()
    stubborn = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; sleep 60"], start_new_session=True, env={"PATH": os.defpath}
    )
    try:
        time.sleep(0.2)  # its trap is set
        reaper.watch(stubborn.pid)
        reaper.set_grace(0.3)  # a quarter of the one the server granted
        started = time.monotonic()
        reaper.close()
        assert gone(stubborn, 5)
        assert time.monotonic() - started < 5  # SIGKILL after 0.3 s, not 30
    finally:
        stubborn.kill()
        stubborn.wait()
