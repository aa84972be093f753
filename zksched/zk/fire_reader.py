"""Reading every fire record of many jobs at once, for the audit.

Pipelined (many requests in flight, each bounded by a deadline) but windowed, so that a
cluster with 100,000 jobs is read in batches rather than by queueing millions of requests
on one connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zksched.core.audit import StoredFire
from zksched.core.firerecord import FireRecord
from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

WINDOW = 1000  # requests in flight at once

T = TypeVar("T")


def _batches(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def parse_fire(raw: bytes) -> FireRecord | None:
    try:
        return FireRecord.from_json(raw)
    except (ValueError, TypeError, UnicodeDecodeError):
        return None


class FireReader:
    def __init__(self, client: KazooClient, paths: ClusterPaths, timeout: float) -> None:
        self._client = client
        self._paths = paths
        self._timeout = timeout

    def read_all(self, jobs: Iterable[str]) -> dict[str, tuple[StoredFire, ...]]:
        """Every fire record of each job (a job without a fire folder has none)."""
        names = sorted(set(jobs))
        listing: dict[str, list[str]] = {}
        for batch in _batches(names, WINDOW):
            pending = [
                (n, self._client.get_children_async(self._paths.job_fires(n))) for n in batch
            ]
            for name, result in pending:
                try:
                    listing[name] = sorted(wait(result, self._timeout))
                except NoNodeError:
                    listing[name] = []
        nodes = [(name, node) for name in names for node in listing[name]]
        found: dict[str, list[StoredFire]] = {name: [] for name in names}
        for node_batch in _batches(nodes, WINDOW):
            reads: list[tuple[str, str, Any]] = [
                (n, node, self._client.get_async(self._paths.fire(n, node)))
                for n, node in node_batch
            ]
            for name, node, result in reads:
                try:
                    raw, _ = wait(result, self._timeout)
                except NoNodeError:
                    continue  # pruned between the listing and the read
                found[name].append(StoredFire(node, parse_fire(raw)))
        return {name: tuple(fires) for name, fires in found.items()}
