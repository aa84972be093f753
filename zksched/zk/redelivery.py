"""At-least-once delivery: live markers, orphaned claims, and claiming them again.

A claim of an at-least-once job creates, in the same transaction as its record, an
ephemeral *live marker* named after the instant and the claim's nonce; the result is
written in one transaction with the marker's delete. So a record that says `running`
while no marker of its instant exists is an **orphan**: its claimer's session ended
before its result (the member died, or its session expired), and ZooKeeper took the marker
with the session. The job's owner claims it again: a version-checked write of the record
(the next attempt, a new nonce) with a new marker and the fence, one transaction, so of
two members that try, one wins; its zxid is the new fencing token, larger than the first.

Invariants:
- a marker exists only while the session that claimed (or claimed again) is alive;
- a result write that finds its marker gone writes only over a record still ours (read,
  then a version-checked write): a record claimed again meanwhile is the new run's.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from zksched.core.firerecord import FireRecord
from zksched.zk.claims import AlreadyClaimed, Claimed, FireClaims
from zksched.zk.connection import wait
from zksched.zk.firefolder import recorded
from zksched.zk.paths import ClusterPaths

MAX_ORPHAN_READS = 200  # records read a planning, newest first (older ones stay abandoned)


@dataclass(frozen=True)
class Orphan:
    record: FireRecord
    version: int  # the record's version, for the claim again


class Redelivery:
    def __init__(
        self, client: KazooClient, paths: ClusterPaths, claims: FireClaims, timeout: float
    ) -> None:
        self._client = client
        self._claims = claims  # reads, resolves and withdrawals of the records themselves
        self._paths = paths
        self._timeout = timeout
        self._folders: set[str] = set()  # jobs whose marker folder is known to exist
        # records read final (never `running` again): not read again while in the window
        self._final: dict[str, set[str]] = {}
        self._mutex = threading.Lock()  # scans (I/O threads) and the pruner read it

    def marker(self, record: FireRecord) -> str:
        return self._paths.live_marker(record.job, record.scheduled, record.nonce)

    def ensure_folder(self, job: str) -> None:
        if job not in self._folders:
            with contextlib.suppress(NodeExistsError):
                wait(
                    self._client.create_async(self._paths.job_live(job), b"", makepath=True),
                    self._timeout,
                )
            self._folders.add(job)

    def known_final(self, job: str, instant: str) -> bool:
        """Whether a scan here read the record final (pruning may take it)."""
        with self._mutex:
            return instant in self._final.get(job, ())

    def orphans(self, job: str, since: str) -> list[Orphan]:
        """The job's records at or after `since` that are `running` with no live marker,
        oldest first. Raises kazoo errors (the planning is tried again)."""
        try:
            names = wait(self._client.get_children_async(self._paths.job_fires(job)), self._timeout)
        except NoNodeError:
            return []
        try:
            markers = wait(
                self._client.get_children_async(self._paths.job_live(job)), self._timeout
            )
        except NoNodeError:
            markers = []
        live = {name.rsplit("@", 1)[0] for name in markers}
        with self._mutex:
            final = {n for n in self._final.get(job, ()) if n >= since}
        candidates = sorted(
            n for n in recorded(names) if n >= since and n not in live and n not in final
        )
        candidates = candidates[-MAX_ORPHAN_READS:]
        reads = [(n, self._client.get_async(self._paths.fire(job, n))) for n in candidates]
        found = []
        for name, pending in reads:
            try:
                raw, stat = wait(pending, self._timeout)
                record = FireRecord.from_json(raw)
            except NoNodeError:
                continue  # pruned or withdrawn meanwhile
            except (ValueError, TypeError, UnicodeDecodeError):
                continue  # unreadable: `audit` reports it; never run on a guess
            if record.state != "running":
                final.add(name)
            elif record.job == job and record.scheduled == name:
                found.append(Orphan(record, stat.version))
        with self._mutex:
            self._final[job] = final
        return found

    def claim(self, orphan: Orphan, record: FireRecord) -> Claimed | AlreadyClaimed:
        """Claim `orphan` again as `record` (the next attempt, our session and nonce).
        Raises kazoo errors when the outcome is unknown (resolve it by the nonce)."""
        self.ensure_folder(record.job)
        path = self._paths.fire(record.job, record.scheduled)
        txn = self._client.transaction()
        txn.set_data(path, record.to_json(), orphan.version)
        txn.create(self.marker(record), b"", ephemeral=True)
        txn.set_data(self._paths.fence, b"")  # its mzxid: the new fencing token
        results = wait(txn.commit_async(), self._timeout)
        if not any(isinstance(r, Exception) for r in results):
            token = results[-1].mzxid
            claimed = record.with_changes(fencing_token=token)
            return Claimed(path, claimed, token, orphan.version + 1)
        if isinstance(results[0], NoNodeError):
            return AlreadyClaimed(None, pruned=True)
        if isinstance(results[2], NoNodeError):
            wait(self._client.ensure_path_async(self._paths.fence), self._timeout)
        # changed since it was read (a result written late, claimed again by another)
        return AlreadyClaimed(self._claims.read(record.job, record.scheduled))

    def complete(self, claimed: Claimed, record: FireRecord) -> bool:
        """Write the result and delete our marker, together. When the marker is gone (our
        session ended since the claim), write only over a record still ours. False: the
        record was claimed again by another member (its run's result stands)."""
        txn = self._client.transaction()
        txn.set_data(claimed.path, record.to_json(), -1)
        txn.delete(self.marker(claimed.record))
        results = wait(txn.commit_async(), self._timeout)
        if not any(isinstance(r, Exception) for r in results):
            return True
        for _ in range(3):
            ours = self._claims.resolve(claimed.record)  # by its nonce, with its version
            if not isinstance(ours, Claimed):
                return False  # gone, unreadable, or claimed again: not ours to write
            try:
                wait(
                    self._client.set_async(claimed.path, record.to_json(), ours.version),
                    self._timeout,
                )
                return True
            except BadVersionError:
                continue
        return False

    def withdraw(self, claimed: Claimed) -> bool:
        """Delete our bare claim (version `claimed` left) with its marker. A claim of an
        orphan again loses only its marker: the record, `running` with no marker, is the
        orphan it was (its earlier attempts stay in it). False: not deleted (a result was
        written, it was claimed again, or it is gone)."""
        if claimed.version > 0:
            with contextlib.suppress(NoNodeError):  # gone with an earlier session of ours
                wait(self._client.delete_async(self.marker(claimed.record)), self._timeout)
            return True
        txn = self._client.transaction()
        txn.delete(claimed.path, claimed.version)
        txn.delete(self.marker(claimed.record))
        results = wait(txn.commit_async(), self._timeout)
        if not any(isinstance(r, Exception) for r in results):
            return True
        if isinstance(results[1], NoNodeError) and isinstance(results[0], RolledBackError):
            return self._claims.withdraw(claimed)  # the marker went with an earlier session
        return False
