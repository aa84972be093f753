"""Manual triggers: `jobs trigger NAME` leaves a node; the job's owner takes it by deleting it
(exactly one member succeeds) and runs the job once."""

from __future__ import annotations

import json
import time

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths


class Triggers:
    def __init__(self, client: KazooClient, paths: ClusterPaths, timeout: float) -> None:
        self._client = client
        self._paths = paths
        self._timeout = timeout

    def request(self, job: str, requested_by: str) -> str:
        data = json.dumps({"job": job, "requested_at": time.time(), "by": requested_by}).encode()
        path = wait(
            self._client.create_async(
                self._paths.trigger_prefix(job), data, sequence=True, makepath=True
            ),
            self._timeout,
        )
        return str(path).rsplit("/", 1)[1]

    def take(self, znode: str) -> bool:
        """True when this call deleted the trigger, i.e. this member runs it."""
        try:
            wait(self._client.delete_async(f"{self._paths.triggers}/{znode}"), self._timeout)
            return True
        except (NoNodeError, KazooException, KazooTimeoutError):
            return False
