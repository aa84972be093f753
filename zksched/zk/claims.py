"""Per-fire claims: one persistent record per (job, UTC instant), created exactly once.

The create is the gate that makes every instant run at most once, whoever owns the job and
whatever the clocks say. Its transaction id (czxid) is the fire's fencing token: it grows
with every fire of the job across the whole cluster.

A create whose reply was lost (ConnectionLoss, or our deadline) may have succeeded: the
record carries a nonce unique to the attempt, so NodeExists with our nonce means "ours".

Fires due at the same instant are claimed in one transaction (`send_batches`): one request
instead of one per fire. A transaction applies whole or not at all; its creates report no
czxid, so it also writes the `fence` node, whose mzxid is the transaction's zxid: the
czxid of every record it created.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zksched.core.firerecord import FireRecord
from zksched.zk.connection import wait
from zksched.zk.firefolder import (
    effective_horizon,
    recorded,
    stored_horizon,
)
from zksched.zk.history import FireHistory
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)


LATE_CLAIM_ATTEMPTS = 3  # reads of a fire folder that keeps changing under a late claim


class ClaimConflict(Exception):
    """A late claim found the fire folder changed on every attempt: outcome "not claimed"
    (nothing was created), retried later like a claim whose reply was lost."""


@dataclass(frozen=True)
class Claimed:
    path: str
    record: FireRecord
    fencing_token: int
    version: int = 0  # the record's version the claim left (1+ when claimed again)


@dataclass(frozen=True)
class AlreadyClaimed:
    record: FireRecord | None  # None when the existing record cannot be parsed (or pruned)
    pruned: bool = False  # a late claim refused: at or behind the job's pruning horizon
    passed: bool = False  # a late claim refused: a newer skip range covers the instant


# a batch's claims; None: it did not apply; an exception: its outcome is unknown
ClaimReply = list[Claimed] | Exception | None


class SentBatch(NamedTuple):
    """A batch's claim transaction, sent (`FireClaims.send_batches`)."""

    paths: list[str]
    records: list[FireRecord]
    pending: Any  # kazoo's async result


class FireClaims(FireHistory):
    """Claiming instants in the jobs' fire folders (reading and pruning them: FireHistory)."""

    def __init__(self, client: KazooClient, paths: ClusterPaths, timeout: float) -> None:
        super().__init__(client, paths, timeout)
        self._fence_ready = False
        self._folders: set[str] = set()  # jobs whose fire folder is known to exist

    def _ensure_fence(self) -> None:
        """The `fence` node, whose setData gives a transaction's claims their token."""
        if not self._fence_ready:
            wait(self._client.ensure_path_async(self._paths.fence), self._timeout)
            self._fence_ready = True

    def ensure_folder(self, job: str) -> None:
        """Create the job's fire folder if need be (a transaction's creates cannot)."""
        if job not in self._folders:
            self._ensure_folders([job])

    def ensure_folders(self, jobs: list[str]) -> list[str]:
        """Make the fire folders of `jobs` not known to exist, pipelined (before first
        fires); returns the jobs whose folder this call created (empty, then)."""
        missing = [job for job in jobs if job not in self._folders]
        return self._ensure_folders(missing) if missing else []

    def _ensure_folders(self, jobs: list[str]) -> list[str]:
        # one create each (kazoo's ensure_path would first ask whether it exists), pipelined
        pending = [
            (job, self._client.create_async(self._paths.job_fires(job), b"", makepath=True))
            for job in jobs
        ]
        created = []
        for job, result in pending:
            try:
                wait(result, self._timeout)
                created.append(job)
            except NodeExistsError:
                pass
            self._folders.add(job)
        return created

    def claim(self, record: FireRecord) -> Claimed | AlreadyClaimed:
        """Create the fire record. Raises kazoo errors/timeouts when the outcome is unknown:
        call `resolve()` once connected again."""
        path = self._paths.fire(record.job, record.scheduled)
        # One create request per attempt, never kazoo's makepath (which, after NoNode, makes
        # the folder and sends the create again from a callback): a resolve sent after a lost
        # reply must find every create of ours already applied or never to be applied.
        for _ in range(2):
            try:
                _, stat = wait(
                    self._client.create_async(path, record.to_json(), include_data=True),
                    self._timeout,
                )
            except NoNodeError:  # its first fire: not applied; make the folder, then again
                self._folders.discard(record.job)
                self._ensure_folders([record.job])
                continue
            except NodeExistsError:
                outcome = self.resolve(record)
                assert outcome is not None  # it exists: it was just reported so
                return outcome
            self._folders.add(record.job)
            return Claimed(path, record.with_changes(fencing_token=stat.czxid), stat.czxid)
        raise ClaimConflict(f"the fire folder of {record.job} vanished twice while it was claimed")

    def claim_late(self, record: FireRecord, marker: str | None = None) -> Claimed | AlreadyClaimed:
        """Create the record of an instant that may be older than records other members have
        run and pruned since (a retry, a catch-up, a fire handed back): only if the instant
        is newer than the job's pruning horizon, and only if the horizon did not move in
        between (the create goes with a check of the fire folder's version, which every
        prune bumps before it deletes anything). A plain create could bring a pruned
        instant back and run it twice. Refused too behind a newer record (instants are
        claimed in order). Raises like `claim` when the outcome is unknown. `marker`: an
        ephemeral node created with the record (at-least-once, zk/redelivery.py)."""
        folder = self._paths.job_fires(record.job)
        path = self._paths.fire(record.job, record.scheduled)
        for _ in range(LATE_CLAIM_ATTEMPTS):
            try:
                raw, stat = wait(self._client.get_async(folder), self._timeout)
            except NoNodeError:
                self._folders.discard(record.job)
                self.ensure_folder(record.job)  # its first fire: nothing was ever pruned
                continue
            children = wait(self._client.get_children_async(folder), self._timeout)
            named = recorded(children)
            horizon = effective_horizon(stored_horizon(raw, stat.version), stat.mtime, named)
            if horizon is not None and horizon >= record.scheduled:
                return AlreadyClaimed(None, pruned=True)
            # never inside a skip range another member recorded meanwhile: the record just
            # after the instant is the only one whose range can cover it
            newer = sorted(c for c in named if c > record.scheduled)
            if (
                record.scheduled not in children
                and newer
                and self._covers(record.job, newer[0], record.scheduled)
            ):
                return AlreadyClaimed(None, passed=True)
            self._ensure_fence()
            txn = self._client.transaction()
            txn.check(folder, stat.version)
            txn.create(path, record.to_json())
            if marker is not None:
                txn.create(marker, b"", ephemeral=True)
            txn.set_data(self._paths.fence, b"")  # its mzxid: the record's czxid
            results = wait(txn.commit_async(), self._timeout)
            if not any(isinstance(r, Exception) for r in results):
                self._folders.add(record.job)
                token = results[-1].mzxid
                return Claimed(path, record.with_changes(fencing_token=token), token)
            if isinstance(results[1], NodeExistsError):
                outcome = self.resolve(record)
                if outcome is not None:
                    return outcome
            if isinstance(results[-1], NoNodeError):
                self._fence_ready = False  # the fence node was deleted: made again next time
            # the folder changed (a prune, or the job deleted and made again): read again
        raise ClaimConflict(f"{folder} kept changing while {record.scheduled} was claimed")

    def _covers(self, job: str, node: str, instant: str) -> bool:
        """Whether the record at `node` is a skip range reaching back to `instant`."""
        try:
            found = self.read(job, node)
        except NoNodeError:
            return False
        if found is None or found.state != "skipped" or (found.job, found.scheduled) != (job, node):
            return False
        covers_from = found.extra.get("covers_from")
        return isinstance(covers_from, str) and covers_from <= instant

    def claim_batches(
        self, batches: list[list[FireRecord]], payloads: list[list[bytes]] | None = None
    ) -> list[ClaimReply]:
        """Claim each batch in one transaction (`send_batches`, then every `answers`)."""
        return list(self.answers(self.send_batches(batches, payloads)))

    def send_batches(
        self, batches: list[list[FireRecord]], payloads: list[list[bytes]] | None = None
    ) -> list[SentBatch]:
        """Send one transaction per batch, all before any reply is awaited, so a burst's
        claims cost one round trip, not one per batch. `payloads`: the records' JSON,
        encoded ahead (`ClaimDraft`). Raises when they could not be sent (nothing known
        to have applied; an exception after the first send leaves those sent unknown)."""
        self._ensure_fence()
        missing = sorted({r.job for batch in batches for r in batch} - self._folders)
        if missing:  # first fires: the folders (the transaction cannot make them)
            self._ensure_folders(missing)
        sent = []
        for i, records in enumerate(batches):
            txn = self._client.transaction()
            paths = [self._paths.fire(r.job, r.scheduled) for r in records]
            encoded = [r.to_json() for r in records] if payloads is None else payloads[i]
            for path, data in zip(paths, encoded, strict=True):
                txn.create(path, data)
            txn.set_data(self._paths.fence, b"")
            sent.append(SentBatch(paths, records, txn.commit_async()))
        return sent

    def answers(self, sent: list[SentBatch]) -> Iterator[ClaimReply]:
        """Each sent batch's outcome, in order, as soon as its reply is in (one deadline
        for all, from now): its claims; None (it did not apply: one was claimed already,
        so claim them one by one); or the exception that left its outcome unknown
        (`resolve()` each one). Never raises."""
        return self._answers(sent, time.monotonic() + self._timeout)

    def _answers(self, sent: list[SentBatch], deadline: float) -> Iterator[ClaimReply]:
        for batch in sent:
            try:
                results = wait(batch.pending, max(0.001, deadline - time.monotonic()))
            except Exception as exc:  # the transaction may have applied
                yield exc
                continue
            if any(isinstance(r, Exception) for r in results):
                if any(isinstance(r, NoNodeError) for r in results):
                    self._folders.clear()  # a folder we knew is gone (a job deleted): re-check
                    self._fence_ready = False  # or the fence node: made again next time
                yield None
                continue
            token = results[-1].mzxid
            yield [
                Claimed(path, record.with_changes(fencing_token=token), token)
                for path, record in zip(batch.paths, batch.records, strict=True)
            ]

    def resolve(self, record: FireRecord) -> Claimed | AlreadyClaimed | None:
        """What became of a claim attempt: ours, someone else's, or None (no record)."""
        path = self._paths.fire(record.job, record.scheduled)
        try:
            raw, stat = wait(self._client.get_async(path), self._timeout)
        except NoNodeError:
            return None
        try:
            existing = FireRecord.from_json(raw)
        except (ValueError, TypeError, UnicodeDecodeError):
            log.error("fire record %s is unreadable; treating the fire as claimed", path)
            return AlreadyClaimed(None)
        if existing.nonce == record.nonce:
            # claimed again (at-least-once), the claim was a write: its zxid is the token
            token = stat.czxid if stat.version == 0 else stat.mzxid
            return Claimed(path, existing.with_changes(fencing_token=token), token, stat.version)
        return AlreadyClaimed(existing)

    def withdraw(self, claimed: Claimed) -> bool:
        """Delete our claim's record if it is still the bare claim (version 0: no result
        was ever written to it). True: deleted now; False: gone already, or not a bare
        claim any more (left as it is). Raises when the outcome is unknown."""
        try:
            wait(self._client.delete_async(claimed.path, 0), self._timeout)
        except (NoNodeError, BadVersionError):
            return False
        return True

    def note_attempt(self, claimed: Claimed, record: FireRecord, version: int) -> bool:
        """Write a retried fire's record between its attempts, only over the version the
        previous note left (`version`: 0 after the claim). False: the record changed
        otherwise (its result written already: a late note never hides it)."""
        try:
            wait(self._client.set_async(claimed.path, record.to_json(), version), self._timeout)
        except (NoNodeError, BadVersionError):
            return False
        return True

    def complete(self, claimed: Claimed, record: FireRecord) -> bool:
        """Write the final record. Unconditional: the run's own result is the truth. False:
        the record is gone (with its job's history, `jobs delete`, or by hand); it is not
        made again, which would bring a deleted job's folder back."""
        try:
            wait(self._client.set_async(claimed.path, record.to_json(), -1), self._timeout)
        except NoNodeError:
            return False
        return True

    def complete_many(self, results: list[tuple[Claimed, FireRecord]]) -> bool:
        """Write final records in one transaction. False when it did not apply (a record is
        gone): nothing was changed; write them one by one."""
        txn = self._client.transaction()
        for claimed, record in results:
            txn.set_data(claimed.path, record.to_json(), -1)
        outcome = wait(txn.commit_async(), self._timeout)
        return not any(isinstance(r, Exception) for r in outcome)
