"""Function jobs in an app: run this in several terminals (or as several workers); each
instant runs in one of them.

    scripts/zookeeper start
    python examples/functions.py 127.0.0.1:2181     # twice or more; Ctrl-C stops one
    zksched --client-id example-app jobs history heartbeat
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading

from zksched import Cluster, Fire

cluster = Cluster(
    zk=sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:2181",
    client_id="example-app",
    session_timeout=5,
)


@cluster.cron("*/5 * * * * *", overlap="skip", catchup="latest", timeout="4s")
def heartbeat(fire: Fire) -> None:
    print(f"pid {os.getpid()}: {fire.key} (token {fire.fencing_token})", flush=True)


@cluster.cron("*/10 * * * * *", delivery="at-least-once")
async def refresh(fire: Fire) -> None:
    await asyncio.sleep(0.1)  # idempotent on fire.key: it may run again after a crash
    print(f"pid {os.getpid()}: refreshed for {fire.key} (attempt {fire.attempt})", flush=True)


if __name__ == "__main__":
    # SIGTERM (a deploy, systemd, Kubernetes) and Ctrl-C stop the Cluster first, so the other
    # processes take its jobs and leadership at once (not after the session timeout); then
    # the signal does what it does anyway: SIGTERM ends the process, Ctrl-C raises
    # KeyboardInterrupt. Your own handler may call cluster.stop() instead (docs/library.md).
    cluster.stop_on_signals()
    cluster.start()
    print(f"member {cluster.member_id}; Ctrl-C to stop", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()  # the app's own work would go here
