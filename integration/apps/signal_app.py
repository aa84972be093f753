"""A test app stopped by SIGTERM the way docs/library.md shows:
`python -m integration.apps.signal_app ZK CLIENT_ID LOG helper|event`.

`helper`: `cluster.stop_on_signals()`, the main thread then sleeps (SIGTERM's default action
ends the process once the Cluster has stopped). `event`: the handler of examples/functions.py
(it sets an Event; the main thread calls `cluster.stop()`).

It registers JOBS every-second function jobs and appends to LOG, one line each:
`<pid> lead|follow <time>` on every change of leadership, and `<pid> owns <n> <time>` each
time the number of those jobs it owns changes (polled every 5 ms), so that a test can tell
when the other process took the jobs and the leadership of one given SIGTERM. Prints
`ready <member id>` once started. zksched's log (INFO) goes to stderr, for a failing test to show.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from zksched import Cluster, Fire

JOBS = 12


def main() -> None:
    zk, client_id, log, how = sys.argv[1:5]
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"
    )
    session = float(os.environ.get("SESSION", "10"))
    cluster = Cluster(zk, client_id, session_timeout=session)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(text: str) -> None:
        os.write(fd, f"{os.getpid()} {text} {time.time():.3f}\n".encode())

    def work(fire: Fire) -> None:
        pass

    for i in range(JOBS):
        cluster.add_job(work, "* * * * * *", name=f"job{i}", overlap="allow")
    cluster.on_leader_change(lambda leading, _token: write("lead" if leading else "follow"))

    stopped = threading.Event()
    if how == "helper":
        cluster.stop_on_signals()
    else:
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    cluster.start()

    def watch_owners() -> None:
        owned = -1
        while cluster.running:
            now = sum(cluster.is_owner(f"job{i}") for i in range(JOBS))
            if now != owned:
                owned = now
                write(f"owns {now}")
            time.sleep(0.005)

    threading.Thread(target=watch_owners, daemon=True).start()
    print(f"ready {cluster.member_id}", flush=True)
    if how == "helper":
        while True:
            time.sleep(3600)  # SIGTERM: the Cluster stops, then SIGTERM ends the process
    stopped.wait()
    cluster.stop()


if __name__ == "__main__":
    main()
