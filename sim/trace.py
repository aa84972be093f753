"""A simulated run's trace, readable: fire keys and instants as operators write them."""

from __future__ import annotations

import re

from sim.world import EPOCH

_DATETIME = re.compile(
    r"datetime\.datetime\((\d+), (\d+), (\d+), (\d+), (\d+)(?:, (\d+))?(?:, \d+)?, "
    r"tzinfo=datetime\.timezone\.utc\)"
)
_ENUM = re.compile(r"<\w+\.(\w+): '[^']*'>")


def readable(text: str) -> str:
    text = _DATETIME.sub(lambda g: f"{int(g[4]):02d}:{int(g[5]):02d}:{int(g[6] or 0):02d}", text)
    return _ENUM.sub(lambda g: g[1], text)


def render(trace: list[tuple[float, str, str]], pattern: str = "") -> list[str]:
    """Lines `seconds-into-the-run who what`, only those naming `pattern` (and the cluster's
    own events: sessions, partitions, outages, table changes) when it is given."""
    out = []
    cluster = ("crash", "sigterm", "cut", "session", "connected")
    for t, who, text in trace:
        line = readable(text)
        wanted = (
            not pattern
            or pattern in line
            or who in ("zk", "net", "operator")
            or any(w in line for w in cluster)
        )
        if wanted:
            out.append(f"{t - EPOCH:9.3f} {who:9} {line}")
    return out
