"""A test app: 20 every-second function jobs that append `<fire key> <member> <token>` to a
log, run as a process of its own: `python -m integration.apps.churn_app ZK CLIENT_ID LOG`.

SIGTERM stops it gracefully (Cluster.stop: the others take its jobs at once); SIGKILL is the
crash. Used by integration/test_app_churn.py.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from zksched import Cluster, Fire

JOBS = 20


def recorder(log: str) -> object:
    def record(fire: Fire) -> None:
        line = f"{fire.key} {fire.member_id} {fire.fencing_token}\n".encode()
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one short write with O_APPEND: lines never interleave
        finally:
            os.close(fd)

    return record


def main() -> None:
    zk, client_id, log = sys.argv[1:4]
    session = float(os.environ.get("CHURN_SESSION_TIMEOUT", "3"))
    cluster = Cluster(zk, client_id, session_timeout=session, stop_grace=5)
    for i in range(JOBS):
        function = recorder(log)
        cluster.add_job(
            function,  # type: ignore[arg-type]
            "* * * * * *",
            name=f"fn{i:02d}",
            overlap="allow",
            catchup="all",
            catchup_window="10m",
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cluster.start()
    print(f"ready {cluster.member_id}", flush=True)
    stop.wait()
    cluster.stop()


if __name__ == "__main__":
    main()
