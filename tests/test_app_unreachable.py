"""`Cluster.start()` against a ZooKeeper that does not answer (a local port where nothing
listens): one warning line while it waits, not one per connection attempt, then a clear
ClusterUnavailable; kazoo's own lines of that client are held back only while it connects."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from tools.zkserver import free_port
from zksched import Cluster, ClusterUnavailable
from zksched.app.connecting import QuietWhileConnecting

ALONE = """
import json, logging, sys
from tools.zkserver import free_port
from zksched import Cluster, ClusterUnavailable

class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []
    def emit(self, record):
        self.records.append(record)

keep = Keep()
logging.getLogger().addHandler(keep)
logging.getLogger("kazoo").setLevel(logging.DEBUG)
hosts = f"127.0.0.1:{free_port()}"
cluster = Cluster(hosts, "billing", session_timeout=2)
try:
    cluster.start(timeout=3)
    raise SystemExit("started against nothing")
except ClusterUnavailable as exc:
    message = str(exc)
print(json.dumps({
    "hosts": hosts,
    "warnings": [[r.name, r.getMessage()] for r in keep.records],
    "message": message,
    "running": cluster.running,
}))
"""


def test_one_warning_line_then_cluster_unavailable() -> None:
    # in a process of its own: a client another test left retrying would log here too
    done = subprocess.run(
        [sys.executable, "-c", ALONE], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    hosts, warnings, message = seen["hosts"], seen["warnings"], seen["message"]
    assert [name for name, _ in warnings] == ["zksched.app"], warnings
    assert hosts in warnings[0][1] and "Connection refused" in warnings[0][1]
    assert f"cannot reach ZooKeeper at {hosts} within 3s" in message
    assert "has not joined cluster billing" in message
    assert "register" not in message  # it has no jobs: nothing was to be registered
    assert not seen["running"]


def test_an_app_with_jobs_says_they_are_not_registered(caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(f"127.0.0.1:{free_port()}", "billing", session_timeout=2)
    cluster.add_job(lambda fire: None, "@hourly", name="tidy")
    with pytest.raises(ClusterUnavailable, match=r"its 1 function job\(s\) are not registered"):
        cluster.start(timeout=0.5)  # shorter than the wait before the warning: none
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_only_the_attempt_lines_and_only_while_connecting_are_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="kazoo")
    quiet = QuietWhileConnecting(logging.getLogger("kazoo.client"))
    quiet.warning("Connection dropped: %s", "socket connection error: Connection refused")
    quiet.warning("AUTH_FAILED closing: %s", "bad credential")
    assert quiet.last == "Connection dropped: socket connection error: Connection refused"
    quiet.connecting = False
    quiet.warning("Connection dropped: %s", "outage")
    shown = [r.getMessage() for r in caplog.records if r.name == "kazoo.client"]
    assert shown == ["AUTH_FAILED closing: bad credential", "Connection dropped: outage"]
