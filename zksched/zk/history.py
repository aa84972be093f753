"""A job's fire folder as history: its records listed and read, pruned down to what the job
keeps (the pruning horizon raised first), deleted with the job. Claiming instants in it is
FireClaims' (zk/claims.py), which builds on this.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from zksched.core.firekey import is_instant
from zksched.core.firerecord import FireRecord
from zksched.zk.connection import finish_delete, wait
from zksched.zk.fire_reader import parse_fire
from zksched.zk.firefolder import (
    UNREADABLE_HORIZON,
    effective_horizon,
    recorded,
    stored_horizon,
)
from zksched.zk.paths import ClusterPaths


class FireHistory:
    def __init__(self, client: KazooClient, paths: ClusterPaths, timeout: float) -> None:
        self._client = client
        self._paths = paths
        self._timeout = timeout

    def instants(self, job: str) -> list[str]:
        """The instants that have a record, oldest first (names that are no instant are
        somebody else's: no history, never pruned; `audit` reports them)."""
        return self._instants(job) or []

    def history(self, job: str) -> tuple[list[str], str | None]:
        """`instants`, then `pruned_through` bounded by them (listed first: a pruner raises
        the horizon before it deletes). One read for a job without a fire folder, which has
        neither: most jobs of a large table taken over have never fired."""
        instants = self._instants(job)
        if instants is None:
            return [], None
        return instants, self.pruned_through(job, instants)

    def _instants(self, job: str) -> list[str] | None:
        """`instants`; None when the job has no fire folder."""
        try:
            names = wait(self._client.get_children_async(self._paths.job_fires(job)), self._timeout)
        except NoNodeError:
            return None
        return sorted(n for n in names if is_instant(n))

    def read(self, job: str, instant: str) -> FireRecord | None:
        try:
            raw, _ = wait(self._client.get_async(self._paths.fire(job, instant)), self._timeout)
        except NoNodeError:
            return None
        return parse_fire(raw)

    def newest(self, jobs: list[str]) -> dict[str, FireRecord | None]:
        """Each job's newest record (None: unreadable): one pipelined listing, then one read,
        per job. Jobs without records are left out."""
        listings = [(j, self._client.get_children_async(self._paths.job_fires(j))) for j in jobs]
        newest: dict[str, str] = {}
        for job, result in listings:
            try:
                children = wait(result, self._timeout)
            except NoNodeError:
                continue
            named = recorded(children)
            if named:
                newest[job] = max(named)
        reads = [(j, self._client.get_async(self._paths.fire(j, i))) for j, i in newest.items()]
        return self._decode_all(reads)

    def read_many(self, job: str, instants: list[str]) -> dict[str, FireRecord | None]:
        return self._decode_all(
            [(i, self._client.get_async(self._paths.fire(job, i))) for i in instants]
        )

    def _decode_all(self, pending: list[tuple[str, Any]]) -> dict[str, FireRecord | None]:
        out: dict[str, FireRecord | None] = {}
        for key, result in pending:
            try:
                raw, _ = wait(result, self._timeout)
            except NoNodeError:
                continue
            out[key] = parse_fire(raw)
        return out

    def pruned_through(self, job: str, records: Iterable[str] = ()) -> str | None:
        """The newest instant whose record pruning may have deleted (kept in the job's fire
        folder, raised before any record goes); None: not pruned since horizons are kept.
        `records`: the job's records as just listed (they bound an unreadable horizon)."""
        try:
            raw, stat = wait(self._client.get_async(self._paths.job_fires(job)), self._timeout)
        except NoNodeError:
            return None
        return effective_horizon(stored_horizon(raw, stat.version), stat.mtime, records)

    def prune(self, job: str, instants: list[str]) -> bool:
        """Delete these records (oldest history) in one transaction; gone ones are fine.

        First the fire folder's horizon (`pruned_through`) is raised to the newest of them,
        by a versioned write (a concurrent pruner's higher horizon is never lowered; on a
        conflict nothing is deleted this time): a catch-up looking for instants that never
        ran (`core.catchup.holes`) must never take a pruned record's instant for one.
        False: nothing deleted (the conflict); try again later."""
        if not instants:
            return True
        folder = self._paths.job_fires(job)
        newest = max(instants)
        raw, stat = wait(self._client.get_async(folder), self._timeout)
        stored = stored_horizon(raw, stat.version)
        # an unreadable one is replaced by what it bounds, or by more
        current = effective_horizon(stored, stat.mtime, instants)
        if stored == UNREADABLE_HORIZON or current is None or current < newest:
            through = max(newest, current or newest)
            body = json.dumps({"pruned_through": through}).encode()
            try:
                wait(self._client.set_async(folder, body, stat.version), self._timeout)
            except BadVersionError:
                return False  # another member pruned meanwhile: next time
        txn = self._client.transaction()
        for instant in instants:
            txn.delete(self._paths.fire(job, instant))
        results = wait(txn.commit_async(), self._timeout)
        if any(isinstance(r, Exception) for r in results):
            # one was gone already (the whole multi rolls back): delete one by one
            for instant in instants:
                self._delete_record(job, instant)
        return True

    def _delete_record(self, job: str, instant: str) -> None:
        """Delete one record; gone is fine, and so is one somebody gave children (a record
        has none: it goes with them, or pruning would stop at it for ever)."""
        path = self._paths.fire(job, instant)
        finish_delete(self._client, path, self._client.delete_async(path), self._timeout)

    def delete_job(self, job: str) -> None:
        """Remove a deleted job's history, and its lock and live-marker folders unless a
        run still holds them (deleting a live contender would pull the lock from under a
        running command)."""
        folder = self._paths.job_fires(job)
        try:
            names = wait(self._client.get_children_async(folder), self._timeout)
        except NoNodeError:
            names = []
        for name in names:  # every child: the folder goes too
            self._delete_record(job, name)
        for path in (folder, self._paths.job_lock(job), self._paths.job_live(job)):
            with contextlib.suppress(NoNodeError, NotEmptyError):
                wait(self._client.delete_async(path), self._timeout)
