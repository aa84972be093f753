"""A busy daemon whose ZooKeeper goes away: no command starts once it holds its session
lost (not even those claimed before, still waiting for a start), and stopped (SIGTERM) it
exits, saying what it could not write: the records it would have completed stay as a
crashed member leaves them (at-least-once instants are run again elsewhere).

kazoo wakes its connection thread with one byte per request on a socketpair that nothing
reads while it is not connected: after ~278 requests the next call blocked its caller until
a connection came back, and such a daemon, stopped during the outage, never exited."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.exceptions import ConnectionLoss

from integration.harness import DaemonProcess, run_cli, wait_until
from tools.zkserver import ZkServer
from zksched.zk.connection import ZkSettings, close_quietly, make_client

JOBS = 150
LAUNCH_UNDER_WAY = 0.5  # s: a start the starters had begun when the loss was seen


def test_a_busy_daemon_stops_while_zookeeper_is_down(
    daemons: Callable[..., DaemonProcess], zk_server: ZkServer, client_id: str, tmp_path: Path
) -> None:
    zk_server.start()
    zk_server.wait_serving(30)
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        "".join(
            f'[jobs.busy-{i:03d}]\nschedule = "* * * * * *"\ncommand = ["sleep", "0.5"]\n'
            'overlap = "allow"\n'
            for i in range(JOBS)
        )
    )
    done = run_cli(zk_server.connect_string, client_id, "jobs", "apply", str(jobfile))
    assert done.returncode == 0, done.stderr
    daemon = daemons(zk_hosts=zk_server.connect_string, extra_args=["--stop-grace", "5"])
    wait_until(lambda: len(daemon.events("fire")) >= 2 * JOBS, 60, what="two rounds of fires")
    zk_server.stop(kill=True)
    time.sleep(3)  # fires and results keep coming, none of them can be sent
    daemon.signal(signal.SIGTERM)
    # the stop grace (5 s), the writes it tries for a few seconds, closing: well under a minute
    try:
        daemon.daemon.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError("still running 60 s after SIGTERM") from None
    assert daemon.events("stopped"), daemon.log_text()[-2000:]
    # a command starts only while its session may live: none once the member held it lost
    # (a start already under way then may still go through)
    (lost,) = [e for e in daemon.events() if "treating the ZooKeeper session as lost" in e["msg"]]
    late = [
        e["fire_key"]
        for e in daemon.events("fire")
        if e["started_ts"] > float(lost["ts"]) + LAUNCH_UNDER_WAY and e["status"] != "terminated"
    ]
    assert not late, f"{len(late)} commands started after the session was lost: {late[:5]}"


def test_requests_made_while_zookeeper_is_gone_never_block_their_caller(
    zk_server: ZkServer,
) -> None:
    """Hundreds of requests while not connected: each call returns at once (the later ones
    fail with ConnectionLoss) instead of blocking on kazoo's wake socket."""
    zk_server.start()
    zk_server.wait_serving(30)
    client = make_client(ZkSettings(hosts=zk_server.connect_string, session_timeout=4.0))
    client.start(timeout=30)
    try:
        zk_server.stop(kill=True)
        wait_until(lambda: not client.connected, 30, what="the connection lost")
        results: list[Any] = []
        caller = threading.Thread(
            target=lambda: results.extend(client.exists_async("/x") for _ in range(1000)),
            daemon=True,
        )
        caller.start()
        caller.join(10)
        assert not caller.is_alive(), f"a call blocked after {len(results)} requests"
        refused = [r for r in results if r.ready() and isinstance(r.exception, ConnectionLoss)]
        assert refused, "no request was refused"
    finally:
        close_quietly(client)
