"""The daemon's HTTP endpoint against a real ZooKeeper: metrics move as fires and skips
happen (scraped over HTTP), /readyz follows the ZooKeeper session, /healthz the loops."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from integration.fires import FireLog, recording_job
from integration.harness import SESSION_TIMEOUT, DaemonProcess, run_cli, wait_until
from tools.faultproxy import BLACKHOLE, PASS, FaultProxy

Start = Callable[..., DaemonProcess]


def start_with_http(daemons: Start, **kwargs: object) -> tuple[DaemonProcess, str]:
    """A daemon listening on a free loopback port; its URL from its own `http` log event."""
    daemon = daemons(extra_args=["--http", "127.0.0.1:0"], **kwargs)
    event = wait_until(lambda: daemon.events("http"), 15, what="HTTP endpoint up")
    return daemon, str(event[0]["url"])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(base: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = get(base + "/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric(base: str, name: str, **labels: str) -> float:
    return scrape(base).get((name, frozenset(labels.items())), 0.0)


def apply(zk: str, client_id: str, path: Path, text: str) -> None:
    path.write_text(text)
    result = run_cli(zk, client_id, "jobs", "apply", str(path))
    assert result.returncode == 0, result.stderr


def test_metrics_count_fires_and_skips(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    daemon, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    assert metric(base, "zksched_members") == 1
    assert metric(base, "zksched_session_connected") == 1

    out = tmp_path / "fires.txt"
    apply(zk, client_id, tmp_path / "jobs.toml", recording_job("tick", out))
    ok = ("zksched_fires_total", {"job": "tick", "outcome": "ok"})
    wait_until(lambda: metric(base, ok[0], **ok[1]) >= 2, 20, what="two fires counted")
    assert metric(base, "zksched_owned_jobs") == 1
    # Every counted fire ran: the counter never runs ahead of what the commands wrote.
    assert metric(base, ok[0], **ok[1]) <= len(FireLog(out).fire_keys())
    assert metric(base, "zksched_fire_delay_seconds_count") >= 2
    assert metric(base, "zksched_run_duration_seconds_count") >= 2

    result = run_cli(zk, client_id, "jobs", "pause", "tick")
    assert result.returncode == 0, result.stderr
    paused = ("zksched_skips_total", {"reason": "paused"})
    wait_until(lambda: metric(base, paused[0], **paused[1]) >= 2, 20, what="paused skips counted")
    assert metric(base, "zksched_job_skips_total", job="tick", reason="paused") >= 2
    assert daemon.alive


def test_readyz_follows_the_session_and_healthz_the_loops(
    daemons: Start, proxy_to: Callable[..., FaultProxy]
) -> None:
    proxy = proxy_to()
    daemon, base = start_with_http(daemons, zk_hosts=proxy.address)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    assert get(base + "/healthz") == (200, "ok\n")

    proxy.set_mode(BLACKHOLE)
    # kazoo notices a silent socket within about two thirds of the session timeout.
    wait_until(lambda: get(base + "/readyz")[0] == 503, SESSION_TIMEOUT + 5, what="not ready")
    status, body = get(base + "/readyz")
    assert status == 503 and "not connected to ZooKeeper" in body
    # /metrics is served from a render at most about a second old (runtime/status/rendered.py)
    wait_until(
        lambda: metric(base, "zksched_session_connected") == 0, 5, what="metrics: disconnected"
    )
    # Cut off from ZooKeeper is not unhealthy: the loops still run, and a restart would not
    # help (a liveness probe must not kill every member during a ZooKeeper outage).
    assert get(base + "/healthz")[0] == 200

    proxy.set_mode(PASS)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready again")
    wait_until(lambda: metric(base, "zksched_session_connected") == 1, 5, what="metrics: connected")
    assert daemon.alive


def test_a_port_in_use_is_refused_before_joining(daemons: Start, zk: str, client_id: str) -> None:
    _, base = start_with_http(daemons)
    address = base.removeprefix("http://")
    result = run_cli(zk, client_id, "run", "--http", address)
    assert result.returncode == 2
    expected = f"zksched: --http {address}: cannot listen: Address already in use"
    assert result.stderr.strip() == expected
    members = run_cli(zk, client_id, "members", "--json")
    assert members.stdout.count('"member_id"') == 1  # only the first daemon ever joined


def test_probes_answer_while_the_daemon_is_frozen_and_go_with_it(daemons: Start) -> None:
    """The public socket is served by a child process (runtime/status/child_server.py): a daemon
    that
    cannot run (SIGSTOP) still has its probes answered at once, from its last verdict, until
    that verdict is older than `stale_after`; a daemon killed by SIGKILL takes the child
    with it."""
    daemon, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    stale_after = max(10.0, 3 * SESSION_TIMEOUT)  # DaemonStatus.stale_after
    daemon.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        assert get(base + "/healthz") == (200, "ok\n")
        assert get(base + "/readyz") == (200, "ok\n")
        assert time.monotonic() - started < 2  # not waiting for the stopped daemon
        wait_until(lambda: get(base + "/healthz")[0] == 503, stale_after + 5, what="stale verdict")
        status, body = get(base + "/healthz")
        assert status == 503 and "no word from the daemon" in body
        # stale after `stale_after`, not much later (the wait above is a hang guard)
        assert stale_after - 1 <= time.monotonic() - started < stale_after + 5
    finally:
        daemon.signal(signal.SIGCONT)
    wait_until(lambda: get(base + "/healthz")[0] == 200, 10, what="healthy again")
    assert metric(base, "zksched_members") == 1  # relayed to the daemon again

    probe_children = probe_processes(daemon)
    assert len(probe_children) == 1
    published = bodies_dir(probe_children[0])
    assert (published / "m").is_file()  # the metrics copy
    daemon.kill()
    wait_until(lambda: gone(probe_children[0]), 10, what="the probe process to exit with it")
    assert not published.exists()  # removed by the child: the daemon could not
    answer, _ = get_or_refused(base + "/healthz")
    assert answer is None  # nobody listens any more


def test_metrics_and_the_page_are_served_from_copies_while_the_daemon_is_frozen(
    daemons: Start,
) -> None:
    """`/metrics` and `/` are answered by the child from the copies the daemon publishes
    after each render (runtime/status/child_server.py, PublishedBodies): a scrape does not wait
    for a
    daemon that cannot run, for as long as a copy may be served (5 s after its render);
    after that the child asks the daemon again."""
    daemon, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    assert metric(base, "zksched_members") == 1  # the first scrape: rendered and published
    assert get(base + "/")[0] == 200
    time.sleep(1.5)  # the child has told the daemon; it keeps the copy fresh meanwhile
    daemon.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        assert metric(base, "zksched_members") == 1
        with urllib.request.urlopen(base + "/metrics", timeout=2) as reply:
            assert reply.headers["X-Zksched-Served"] == "copy"
        status, page = get(base + "/")
        assert status == 200 and "<html" in page.lower()
        assert time.monotonic() - started < 2  # not waiting for the stopped daemon
        time.sleep(max(0.0, started + 6.5 - time.monotonic()))  # every copy is past its time
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            urllib.request.urlopen(base + "/metrics", timeout=2).read()  # asks the daemon
    finally:
        daemon.signal(signal.SIGCONT)
    wait_until(lambda: metric(base, "zksched_members") == 1, 20, what="metrics again")
    assert daemon.alive


def get_or_refused(url: str) -> tuple[int | None, str]:
    try:
        return get(url)
    except (urllib.error.URLError, ConnectionError):
        return None, ""


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_ctrl_c_stops_the_daemon_and_its_probe_process_without_a_traceback(
    daemons: Start,
) -> None:
    """A Ctrl-C at a terminal signals the whole foreground process group: the daemon stops
    gracefully; the probe process (in a group of its own) is stopped by it, not killed
    mid-stop with a KeyboardInterrupt traceback."""
    daemon, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    probes = probe_processes(daemon)
    assert len(probes) == 1
    published = bodies_dir(probes[0])
    assert published.is_dir()
    os.killpg(daemon.pid, signal.SIGINT)  # the harness starts each daemon as a group leader
    assert daemon.process is not None
    assert daemon.process.wait(30) == 0
    wait_until(lambda: gone(probes[0]), 10, what="the probe process to exit")
    assert not published.exists()
    assert "Traceback" not in daemon.log_text()


def test_a_probe_process_that_dies_is_replaced_on_the_same_port(daemons: Start) -> None:
    daemon, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")

    [first] = probe_processes(daemon)
    os.kill(first, signal.SIGKILL)
    wait_until(
        lambda: [pid for pid in probe_processes(daemon) if pid != first],
        10,
        what="a new probe process",
    )
    wait_until(lambda: get_or_refused(base + "/healthz")[0] == 200, 10, what="probes again")
    assert get(base + "/readyz") == (200, "ok\n")
    assert metric(base, "zksched_members") == 1
    assert "the HTTP probe process exited" in daemon.log_text()
    assert daemon.alive


def test_head_and_bad_paths_through_the_probe_process(daemons: Start) -> None:
    _, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    host, port = base.removeprefix("http://").split(":")
    for path in ("/metrics", "/healthz", "/"):
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request("HEAD", path)
            reply = connection.getresponse()
            assert reply.status == 200
            assert int(reply.getheader("Content-Length") or 0) > 0  # the GET body's length
            assert reply.read() == b""
        finally:
            connection.close()
    # a path the relay cannot send on is refused, not dropped without an answer
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall("GET /m\u00e9trics HTTP/1.0\r\n\r\n".encode())
        assert raw.recv(100).startswith(b"HTTP/1.0 400")


def probe_processes(daemon: DaemonProcess) -> list[int]:
    """The daemon's HTTP probe child processes (runtime/status/child_server.py)."""
    server = b"zksched.runtime.status.child_server"
    return [pid for pid in children_of(daemon.pid) if server in cmdline(pid)]


def bodies_dir(probe_pid: int) -> Path:
    """Where the daemon publishes its rendered bodies (the child's 5th argument to its module)."""
    return Path(cmdline(probe_pid).split(b"\0")[7].decode())


def gone(pid: int) -> bool:
    """Exited (a zombie not reaped yet counts: some container inits never reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_slow_clients_cannot_starve_the_probes(daemons: Start) -> None:
    """Issue 19: some 70 connections that each sent one header line every few seconds held
    every request slot, and /healthz failed for as long as they lasted (a restart loop for a
    daemon whose port is reachable from the network). Now a request must arrive whole within
    a deadline, one address holds at most a few slots, and probes have slots of their own."""
    daemon, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    host, port = base.removeprefix("http://").rsplit(":", 1)
    slow: list[socket.socket] = []
    try:
        for _ in range(70):
            conn = socket.create_connection((host, int(port)), timeout=5)
            conn.sendall(b"GET /metrics HTTP/1.0\r\n")
            slow.append(conn)
        # their address holds all its slots: a request beyond them is told so, not dropped
        wait_until(lambda: get(base + "/metrics")[0] == 503, 5, what="a 503 for a busy address")
        worst = 0.0
        until = time.monotonic() + 8
        while time.monotonic() < until:
            for conn in slow:  # one more header line each, every second or so
                with contextlib.suppress(OSError):
                    conn.sendall(b"X-Slow: 1\r\n")
            started = time.monotonic()
            status, _ = get(base + "/healthz")
            worst = max(worst, time.monotonic() - started)
            assert status == 200
            time.sleep(0.5)
        assert worst < 1.0, worst
    finally:
        for conn in slow:
            conn.close()
    assert daemon.alive
