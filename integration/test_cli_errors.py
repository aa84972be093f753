"""Bad input gets one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import time

from integration.harness import run_cli
from tools.zkserver import free_port


def assert_one_line(stderr: str) -> None:
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def timed_cli(hosts: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = run_cli(hosts, "c1", *args)
    return result, time.monotonic() - started


def test_unreachable_zookeeper_exits_3_within_connect_timeout() -> None:
    hosts = f"127.0.0.1:{free_port()}"
    _, before = timed_cli(hosts, "next", "0 2 * * *")
    result, elapsed = timed_cli(hosts, "--connect-timeout", "1", "members")
    _, after = timed_cli(hosts, "next", "0 2 * * *")
    assert result.returncode == 3
    assert_one_line(result.stderr)
    assert hosts in result.stderr
    # the 1 s timeout, not the default 5 s, beyond what a command that needs no ZooKeeper
    # takes now (the interpreter's start: seconds on a loaded machine)
    start_cost = max(before, after)
    assert elapsed - start_cost < 1 + 3, (elapsed, start_cost)


def test_unresolvable_host_exits_3() -> None:
    result = run_cli("no-such-host.invalid:2181", "c1", "--connect-timeout", "1", "members")
    assert result.returncode == 3
    assert_one_line(result.stderr)


def test_malformed_connect_string_exits_2(zk: str) -> None:
    for bad in ["", "a b:2181", "host:99999", "h:2181/../etc"]:
        result = run_cli(bad, "c1", "members")
        assert result.returncode == 2, (bad, result.stderr)
        assert_one_line(result.stderr)


def test_invalid_client_id_exits_2(zk: str) -> None:
    for bad in ["../etc", "a/b", "", "x" * 129, ".hidden"]:
        result = run_cli(zk, bad, "members")
        assert result.returncode == 2, (bad, result.stderr)
        assert_one_line(result.stderr)


def test_bad_label_exits_2(zk: str) -> None:
    for bad in ["novalue", "=x", "a/b=c", "k=\x01"]:
        result = run_cli(zk, "c1", "run", "--label", bad)
        assert result.returncode == 2, (bad, result.stderr)
        assert_one_line(result.stderr)


def test_bad_session_timeout_exits_2(zk: str) -> None:
    result = run_cli(zk, "c1", "run", "--session-timeout", "0.1")
    assert result.returncode == 2
    assert_one_line(result.stderr)


def test_every_command_that_names_a_missing_job_exits_2(zk: str, client_id: str) -> None:
    """Issue 19: alike for alike. `jobs history` printed "no fire records" and `owners NAME`
    an owner for a job that is not in the table, both exit 0."""
    for args in [
        ("jobs", "show", "ghost"),
        ("jobs", "history", "ghost"),
        ("jobs", "pause", "ghost"),
        ("jobs", "resume", "ghost"),
        ("jobs", "trigger", "ghost"),
        ("jobs", "delete", "ghost"),
        ("owners", "ghost"),
    ]:
        result = run_cli(zk, client_id, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert_one_line(result.stderr)
        # the cluster named: a mistyped client id must not read as a missing job
        assert f"no job named 'ghost' in cluster {client_id}" in result.stderr, result.stderr
