"""`Cluster.start()`'s first connection, said once.

kazoo logs a warning for every failed connection attempt ("Connection dropped: socket
connection error: Connection refused", several a second): an app starting against a
ZooKeeper that does not answer printed dozens before `ClusterUnavailable`. While this one
client connects, those per-attempt lines are held back (on this client only: other
clients' lines, and this one's once it is connected, are kazoo's as always), and
`zksched.app` says once that it is waiting, quoting the last attempt's reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import MutableMapping
from typing import Any

from kazoo.client import KazooClient

from zksched.zk.connection import ZkSettings, make_client

log = logging.getLogger("zksched.app")

SAY_AFTER = 1.0  # seconds without a connection before the one "waiting" line
# kazoo's lines for one failed attempt (kazoo/protocol/connection.py); anything else passes
RETRY_LINES = (
    "Connection dropped",
    "Connection time-out",
    "Cannot resolve",
    "Failed connecting",
    "Transition to CONNECTING",
)


class QuietWhileConnecting(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's logger for one client, holding back its per-attempt warnings while
    `connecting`; the last one held back is kept (`last`), to be quoted once."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})
        self.connecting = True
        self.last: str | None = None

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if (
            self.connecting
            and level < logging.ERROR
            and isinstance(msg, str)
            and msg.startswith(RETRY_LINES)
        ):
            try:
                self.last = msg % args if args else msg
            except (TypeError, ValueError):
                self.last = msg
            return
        super().log(level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs


class NotConnected(Exception):
    """No connection within the timeout; the message says the last attempt's reason."""


def connect_once(settings: ZkSettings, timeout: float) -> KazooClient:
    """A started client, connected within `timeout` seconds, or NotConnected (the client
    stopped and closed). At most one warning line meanwhile."""
    quiet = QuietWhileConnecting(logging.getLogger("kazoo.client"))
    client = make_client(settings, logger=quiet)
    deadline = time.monotonic() + timeout
    started = client.start_async()
    said = False
    if not started.wait(min(SAY_AFTER, timeout)) and timeout > SAY_AFTER:
        said = True
        log.warning(
            "ZooKeeper at %s does not answer yet (%s); waiting up to %gs in all",
            settings.hosts,
            quiet.last or "no answer",
            timeout,
        )
    started.wait(max(0.0, deadline - time.monotonic()))
    if not client.connected:
        reason = quiet.last or "no answer"
        try:
            client.stop()
            client.close()
        except Exception:  # never started properly: nothing to undo
            log.debug("stop after a failed connect", exc_info=True)
        raise NotConnected(reason)
    quiet.connecting = False
    if said:
        log.info("ZooKeeper at %s answered", settings.hosts)
    return client
