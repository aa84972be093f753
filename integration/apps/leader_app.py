"""A test app that says when it leads: `python -m integration.apps.leader_app ZK CLIENT_ID LOG`
appends `<pid> lead|follow <token> <time>` to LOG on every change of leadership."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from zksched import Cluster


def main() -> None:
    zk, client_id, log = sys.argv[1:4]
    cluster = Cluster(zk, client_id, session_timeout=float(os.environ.get("SESSION", "4")))
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def changed(leading: bool, token: int | None) -> None:
        line = f"{os.getpid()} {'lead' if leading else 'follow'} {token} {time.time():.3f}\n"
        os.write(fd, line.encode())

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cluster.on_leader_change(changed)
    cluster.start()
    stop.wait()
    cluster.stop()


if __name__ == "__main__":
    main()
