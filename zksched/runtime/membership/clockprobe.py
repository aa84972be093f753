"""The clock probe: measures this member's clock offset from ZooKeeper's and publishes it.

One small thread: on every (re)connect and every PROBE_INTERVAL it writes its own
ephemeral `clocks/<member_id>` node, compares the server's mtime with the midpoint of the
member's clock around the write, and publishes the result in that node. kazoo's state
listener only wakes it (listeners must never block). A member past WARN_OFFSET logs a
warning: the per-fire claims keep instants exactly-once whatever the clocks say, but a
skewed member fires its jobs early or late.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from zksched.runtime.clock import Clock
from zksched.zk.clocks import ClockNode, ClockReading
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

PROBE_INTERVAL = 10.0
RETRY_INTERVAL = 1.0
WARN_OFFSET = 2.0  # seconds; `zksched members --max-offset` defaults to the same


class ClockProbe:
    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        member_id: str,
        clock: Clock,
        call_timeout: float,
        interval: float = PROBE_INTERVAL,
    ) -> None:
        self._client = client
        self._node = ClockNode(client, paths, member_id, call_timeout)
        self._clock = clock
        self._interval = interval
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._node_session: int | None = None
        self.last: ClockReading | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="zksched-clock", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._client.remove_listener(self._on_state)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            self._wake.set()  # measure at once on (re)connect; never block here

    def _run(self) -> None:
        while not self._stopping.is_set():
            delay = self._interval if self.probe_once() else RETRY_INTERVAL
            self._wake.wait(delay)
            self._wake.clear()

    def probe_once(self) -> bool:
        """Measure and publish; False when not connected or a call failed (retry soon)."""
        client_id = self._client.client_id
        if not self._client.connected or not client_id:
            return False
        try:
            if self._node_session != client_id[0]:
                self._node.ensure(client_id[0])
                self._node_session = client_id[0]
            reading = replace(self._node.measure(self._clock.now), measured_at=self._clock.iso())
            self._node.publish(reading)
        except (KazooException, KazooTimeoutError) as exc:
            self._node_session = None  # re-check the node next time
            log.debug("clock probe failed: %s", exc)
            return False
        if self.last is None or abs(reading.offset_ms) >= WARN_OFFSET * 1000:
            level = (
                logging.WARNING if abs(reading.offset_ms) >= WARN_OFFSET * 1000 else logging.INFO
            )
            log.log(
                level,
                "clock offset from ZooKeeper: %+.0f ms (round trip %.0f ms)",
                reading.offset_ms,
                reading.rtt_ms,
                extra={"event": "clock", "offset_ms": reading.offset_ms, "rtt_ms": reading.rtt_ms},
            )
        self.last = reading
        return True
