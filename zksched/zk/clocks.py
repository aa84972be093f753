"""Clock-offset records: each member's ephemeral `clocks/<member_id>` node.

A member measures its offset from ZooKeeper's clock with a write to its own node: the
server stamps the write's `mtime` (the leader's wall clock, in ms) and the member compares
it with the midpoint of its own clock around the round trip. It then publishes
{"offset_ms", "rtt_ms", "measured_at"} in the same node for `zksched members`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from zksched.core.znodedata import ZnodeDataError, finite_number, load_json
from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths


@dataclass(frozen=True)
class ClockReading:
    offset_ms: float  # local clock minus ZooKeeper's: positive = this member is ahead
    rtt_ms: float  # the measuring write's round trip: the offset is good to about half
    measured_at: str

    def to_json(self) -> bytes:
        data = {
            "offset_ms": round(self.offset_ms, 1),
            "rtt_ms": round(self.rtt_ms, 1),
            "measured_at": self.measured_at,
        }
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ClockReading | None:
        """The reading, or None when the node holds anything else (never raises)."""
        try:
            data = load_json(raw, "clock reading", 64 * 1024)
        except ZnodeDataError:
            return None
        if not isinstance(data, dict):
            return None
        offset, rtt = finite_number(data.get("offset_ms")), finite_number(data.get("rtt_ms"))
        at = data.get("measured_at")
        if offset is None or rtt is None or not isinstance(at, str):
            return None
        return cls(offset, rtt, at)


def offset_from(sent: float, received: float, server_mtime_ms: int) -> ClockReading:
    """Offset of the local clock (epoch seconds around the write) from the server's stamp."""
    midpoint_ms = (sent + received) / 2 * 1000
    return ClockReading(midpoint_ms - server_mtime_ms, (received - sent) * 1000, "")


class ClockNode:
    """This member's clock node (ephemeral: it goes with the session)."""

    def __init__(
        self, client: KazooClient, paths: ClusterPaths, member_id: str, timeout: float
    ) -> None:
        self._client = client
        self._path = paths.clock(member_id)
        self._folder = paths.clocks
        self._timeout = timeout

    def ensure(self, session_id: int) -> None:
        """Make sure the node exists and belongs to this session (a node left by an earlier
        session of the same member id is replaced)."""
        wait(self._client.ensure_path_async(self._folder), self._timeout)
        try:
            wait(self._client.create_async(self._path, b"{}", ephemeral=True), self._timeout)
            return
        except NodeExistsError:
            pass
        try:
            _, stat = wait(self._client.get_async(self._path), self._timeout)
        except NoNodeError:
            stat = None
        if stat is None or stat.ephemeralOwner != session_id:
            with contextlib.suppress(NoNodeError):
                if stat is not None:
                    wait(self._client.delete_async(self._path, stat.version), self._timeout)
            wait(self._client.create_async(self._path, b"{}", ephemeral=True), self._timeout)

    def measure(self, now: Callable[[], float]) -> ClockReading:
        """One write to the node, timed with `now` (the member's clock)."""
        sent = now()
        stat = wait(self._client.set_async(self._path, b"{}", -1), self._timeout)
        received = now()
        return offset_from(sent, received, stat.mtime)

    def publish(self, reading: ClockReading) -> None:
        wait(self._client.set_async(self._path, reading.to_json(), -1), self._timeout)


def read_clocks(
    client: KazooClient, paths: ClusterPaths, member_ids: Iterable[str], timeout: float
) -> dict[str, ClockReading | None]:
    """Each member's published reading (pipelined); None when absent or unreadable."""
    pending: list[tuple[str, Any]] = [
        (m, client.get_async(paths.clock(m))) for m in sorted(set(member_ids))
    ]
    out: dict[str, ClockReading | None] = {}
    for member_id, result in pending:
        try:
            raw, _ = wait(result, timeout)
        except NoNodeError:
            out[member_id] = None
            continue
        out[member_id] = ClockReading.from_json(raw)
    return out
