"""Manual triggers: `jobs trigger NAME` leaves a node; the job's owner takes it by deleting it
(exactly one member succeeds) and runs the job once."""

from __future__ import annotations

import json
import time
from collections.abc import Collection

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from zksched.zk.connection import finish_delete, wait
from zksched.zk.paths import ClusterPaths

MAX_SWEEP = 500  # stray trigger nodes looked at per sweep: a flood goes over several


class Triggers:
    def __init__(self, client: KazooClient, paths: ClusterPaths, timeout: float) -> None:
        self._client = client
        self._paths = paths
        self._timeout = timeout
        self._made: dict[str, int] = {}  # stray trigger node -> its czxid (sweep)

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
            wait(self._client.delete_async(self._node(znode)), self._timeout)
            return True
        except (NoNodeError, KazooException, KazooTimeoutError):
            return False

    def sweep(self, children: list[str], jobs: Collection[str], table_zxid: int) -> list[str]:
        """Delete the trigger nodes of jobs not in the table that were made before the table
        was last written (`table_zxid`: its root's mzxid): triggers of a job deleted since,
        or of none. One made after it may be for a job added since and not read here yet:
        kept, for a later sweep. Pass only a table read whole (a job of a bucket that could
        not be read is not known to be gone). Returns the nodes deleted; failures are left
        for the next sweep."""
        strays = [c for c in children if ClusterPaths.job_of_trigger(c) not in jobs]
        listed = set(strays)
        self._made = {c: z for c, z in self._made.items() if c in listed}
        # a node's czxid never changes: each stray is looked at once, not at every sweep
        unknown = [c for c in strays if c not in self._made][:MAX_SWEEP]
        looked = [(c, self._client.exists_async(self._node(c))) for c in unknown]
        for znode, result in looked:
            try:
                stat = wait(result, self._timeout)
            except (KazooException, KazooTimeoutError):
                continue
            if stat is not None:
                self._made[znode] = stat.czxid
        gone: list[str] = []
        old = [c for c in strays if self._made.get(c, table_zxid) < table_zxid][:MAX_SWEEP]
        # pipelined (the deletes change the folder: the next sweep goes on)
        deletes = [(c, self._client.delete_async(self._node(c))) for c in old]
        for znode, result in deletes:
            try:
                deleted = finish_delete(self._client, self._node(znode), result, self._timeout)
            except (KazooException, KazooTimeoutError):
                continue
            del self._made[znode]
            if deleted:  # else taken, or swept by another member
                gone.append(znode)
        return gone

    def _node(self, znode: str) -> str:
        return f"{self._paths.triggers}/{znode}"
