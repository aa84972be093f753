"""An app for the `functions` benchmark: N every-second function jobs that do nothing but
append `<fire key> <scheduled ts> <started ts>` to a log. Run as a process of its own:
`python -m tools.bench.function_app ZK CLIENT_ID LOG JOBS`; SIGTERM stops it."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from zksched import Cluster, Fire


def recorder(fd: int) -> Callable[[Fire], None]:
    def record(fire: Fire) -> None:
        started = time.time()
        os.write(fd, f"{fire.key} {fire.scheduled.timestamp():.0f} {started:.6f}\n".encode())

    return record


def main() -> None:
    zk, client_id, log, jobs = sys.argv[1:5]
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    cluster = Cluster(zk, client_id, session_timeout=4.0, concurrency=32)
    for i in range(int(jobs)):
        cluster.add_job(recorder(fd), "* * * * * *", name=f"fn-{i:05d}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cluster.start()
    stop.wait()
    cluster.stop()


if __name__ == "__main__":
    main()
