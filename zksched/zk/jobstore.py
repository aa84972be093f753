"""The cluster's job table in ZooKeeper.

Layout: one root znode (`jobs`) names the table's buckets by content id; each bucket is an
immutable, content-addressed blob (`jobs/blobs/<id>`) holding the records of the jobs that
hash into it. Why:
- an apply of any size becomes visible in ONE atomic compare-and-set of the root (a single
  multi-op carrying 100,000 records would pass ZooKeeper's 1 MB request limit); blobs written
  before the switch are invisible until the root names them;
- daemons keep one watch (the root) and re-read only the buckets whose id changed;
- a malformed record inside a bucket disables that job only.
When everything fits in one request (the usual small change), blobs and root go in the same
transaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import mmh3
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zksched.core.jobtable import StoredJob, unreadable_record
from zksched.core.names import is_valid_name
from zksched.core.znodedata import (
    ZnodeDataError,
    load_json_keeping_unfit,
    load_object,
    unfit_problem,
)
from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

FORMAT = 1
TARGET_BLOB_BYTES = 256 * 1024  # bucket count grows to keep blobs about this size
MAX_BLOB_BYTES = 900 * 1024  # below jute.maxbuffer (1 MB) with room for the reply framing
MAX_TXN_BYTES = 800 * 1024  # one multi-op request must stay below jute.maxbuffer too
MIN_BUCKETS = 16


class ConcurrentChange(Exception):
    """Someone else changed the job table between our read and our write: read again."""


class UnreadableBuckets(Exception):
    """Buckets of the table that cannot be read: a change written now would drop their jobs
    (`read_table(whole=True)`). `root` and `jobs`: the table as far as it could be read."""

    def __init__(self, errors: dict[str, str], root: TableRoot, jobs: dict[str, StoredJob]):
        shown = "; ".join(f"job bucket {b} is unreadable ({e})" for b, e in errors.items())
        super().__init__(f"{shown}: a change written now would drop the jobs it holds")
        self.root, self.jobs = root, jobs


class CorruptTable(Exception):
    """The root znode does not hold a job table this version understands. `version`: the
    root's znode version, for an apply that replaces it (`JobStore.commit` over it)."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


_BLOB_ID = re.compile(r"[0-9a-f]{24}")


@dataclass(frozen=True)
class TableRoot:
    generation: int
    buckets: tuple[str, ...]  # blob id of bucket i ("" for an empty bucket)
    version: int  # the root znode's version (-1: it does not exist yet)
    mzxid: int = 0


def bucket_index(name: str, count: int) -> int:
    return int(mmh3.hash(name.encode(), 1, False)) % count


def encode_bucket(jobs: Mapping[str, StoredJob], rewritten_in: int | None = None) -> bytes:
    """The bucket's bytes; ValueError when a record holds what its readers refuse (NaN or
    Infinity, a lone surrogate): such a bucket would not be JSON, and every job in it lost.
    `rewritten_in`: a generation, to give the same jobs another blob id (`commit`)."""
    data: dict[str, Any] = {"format": FORMAT, "jobs": {n: jobs[n].to_data() for n in sorted(jobs)}}
    if rewritten_in is not None:
        data["rewritten_in"] = rewritten_in
    try:
        return _dump(data)
    except ValueError:
        bad = [n for n in sorted(jobs) if not _encodes(jobs[n].to_data())]
        raise ValueError(
            f"the record of job {', '.join(bad)} holds a value JSON cannot carry "
            "(NaN, Infinity or a lone surrogate): not written"
        ) from None


def _dump(data: object) -> bytes:
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _encodes(data: object) -> bool:
    try:
        _dump(data)
    except ValueError:
        return False
    return True


def blob_id(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:24]


def decode_bucket(raw: bytes) -> tuple[dict[str, StoredJob], str | None]:
    """The jobs of a bucket, and an error if the bucket as a whole cannot be read (entries
    that are not jobs are left out, and logged)."""
    try:
        data, check = load_json_keeping_unfit(raw, "job bucket")
    except ZnodeDataError as exc:
        return {}, str(exc)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        return {}, "job bucket has no jobs table"
    jobs: dict[str, StoredJob] = {}
    strangers: list[str] = []
    for name, entry in data["jobs"].items():
        if not is_valid_name(name):
            # never a job, and never a path: '..' or 'a/b' would name another node
            strangers.append(repr(name)[:60])
            continue
        problem = unfit_problem(entry) if check else None
        if problem is not None:  # that job disabled (and logged so), not all the bucket's
            spec = entry.get("spec") if isinstance(entry, dict) else entry
            jobs[name] = StoredJob(name, unreadable_record(problem, spec), "")
            continue
        if isinstance(entry, dict):
            record, updated = entry.get("spec"), entry.get("updated_at")
        else:
            record, updated = entry, None
        if isinstance(record, dict) and record.get("name") == name:
            record["name"] = name  # the key's string: one per job, not two (a daemon keeps it)
        # an apply stamps every job it changes alike: one string for all of them
        stamp = sys.intern(updated) if isinstance(updated, str) else ""
        jobs[name] = StoredJob(name, record, stamp)
    if strangers:  # the bucket's jobs are all here: an error is for a bucket lost whole
        shown = ", ".join(strangers[:5]) + (" ..." if len(strangers) > 5 else "")
        log.error("a job bucket holds entries that are not job names (ignored): %s", shown)
    return jobs, None


def split_buckets(jobs: Mapping[str, StoredJob], count: int) -> list[dict[str, StoredJob]]:
    buckets: list[dict[str, StoredJob]] = [{} for _ in range(count)]
    for name, job in jobs.items():
        buckets[bucket_index(name, count)][name] = job
    return buckets


def choose_bucket_count(jobs: Mapping[str, StoredJob], current: int) -> int:
    """Keep the current count unless blobs would grow too large (or the table is new)."""
    total = sum(len(json.dumps(j.to_data(), separators=(",", ":"))) + 8 for j in jobs.values())
    wanted = MIN_BUCKETS
    while wanted * TARGET_BLOB_BYTES < total:
        wanted *= 2
    count = max(current, wanted) if current else wanted
    # A hash-skewed bucket can still be too large: double until none is.
    while True:
        sizes = [len(encode_bucket(b)) for b in split_buckets(jobs, count)]
        if max(sizes, default=0) <= MAX_BLOB_BYTES:
            return count
        count *= 2


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobStore:
    def __init__(self, client: KazooClient, paths: ClusterPaths, timeout: float) -> None:
        self._client = client
        self._paths = paths
        self._timeout = timeout
        # blob id -> (its jobs, why it could not be read); blobs never change, so cache them.
        self._blob_cache: dict[str, tuple[dict[str, StoredJob], str | None]] = {}

    # -- reading -------------------------------------------------------------------------------

    def read_root(self, watch: Callable[[Any], None] | None = None) -> TableRoot:
        try:
            raw, stat = wait(self._client.get_async(self._paths.jobs, watch), self._timeout)
        except NoNodeError:
            if watch is not None:  # be told when the table is first created
                wait(self._client.exists_async(self._paths.jobs, watch), self._timeout)
            return TableRoot(0, (), -1)
        if not raw:
            return TableRoot(0, (), stat.version, stat.mzxid)
        try:
            data = load_object(raw, "job table root")
            buckets = tuple(data["buckets"])
            generation = data["generation"]
            if not all(b == "" or (isinstance(b, str) and _BLOB_ID.fullmatch(b)) for b in buckets):
                raise ValueError("a bucket id is not a bucket id")
            if type(generation) is not int or not 0 <= generation < 2**63:
                raise ValueError("the generation is not a count")
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptTable(
                f"job table root {self._paths.jobs} is unreadable: {exc}", stat.version
            ) from exc
        return TableRoot(generation, buckets, stat.version, stat.mzxid)

    def read_blobs(
        self, root: TableRoot, ids: set[str]
    ) -> Iterator[tuple[str, tuple[dict[str, StoredJob], str | None]]]:
        """Read (pipelined) and decode these blobs of `root`, one at a time: each with its
        jobs, or why it is unreadable. One at a time, so that a caller that parses them keeps
        one bucket's decoded records at once, not the whole table's (at a million jobs, that
        peak would stay in the process's RSS).

        A blob that vanished (collected after a newer apply) raises ConcurrentChange: the
        caller reads the root again. One missing while `root` is still the root raises
        CorruptTable: reading again would never end, and an apply replaces the table.
        """
        pending = deque((b, self._client.get_async(self._paths.blob(b))) for b in ids if b)
        while pending:
            blob, result = pending.popleft()  # its bytes go with it
            try:
                raw, _ = wait(result, self._timeout)
            except NoNodeError:
                self._missing_blob(root, blob)
            del result
            yield blob, self._decode_blob(blob, raw)

    def _missing_blob(self, root: TableRoot, blob: str) -> NoReturn:
        stat = wait(self._client.exists_async(self._paths.jobs), self._timeout)
        if stat is not None and (stat.mzxid, stat.version) == (root.mzxid, root.version):
            raise CorruptTable(
                f"job table root {self._paths.jobs} names bucket {blob}, which does not exist",
                root.version,
            )
        raise ConcurrentChange(f"bucket {blob} vanished")

    def read_buckets(self, root: TableRoot) -> tuple[dict[str, StoredJob], dict[str, str]]:
        """Every stored job of the table `root` names, and the buckets (blob ids) that could
        not be read, with why."""
        wanted = {b for b in root.buckets if b and b not in self._blob_cache}
        self._blob_cache.update(dict(self.read_blobs(root, wanted)))
        jobs: dict[str, StoredJob] = {}
        errors: dict[str, str] = {}
        for blob in root.buckets:
            if not blob:
                continue
            bucket, error = self._blob_cache[blob]
            if error:
                errors[blob] = error
            jobs.update(bucket)
        live = set(root.buckets)
        for stale in [b for b in self._blob_cache if b not in live]:
            del self._blob_cache[stale]
        return jobs, errors

    @staticmethod
    def _decode_blob(blob: str, raw: bytes) -> tuple[dict[str, StoredJob], str | None]:
        jobs, error = decode_bucket(raw)
        if error:
            log.error(
                "job bucket %s is unreadable (%s): its jobs are left out",
                blob,
                error,
                extra={"event": "job-bucket-invalid"},
            )
        return jobs, error

    def read_table(self, whole: bool = False) -> tuple[TableRoot, dict[str, StoredJob]]:
        """The table as far as it can be read; `whole`: all of it or UnreadableBuckets (for a
        change: written from what could be read, it would drop the lost buckets' jobs)."""
        for _ in range(5):
            root = self.read_root()
            try:
                jobs, errors = self.read_buckets(root)
            except ConcurrentChange:
                continue
            if errors and whole:
                raise UnreadableBuckets(errors, root, jobs)
            return root, jobs
        raise ConcurrentChange("the job table kept changing while being read")

    def read_job(self, name: str) -> StoredJob | None:
        """One job as stored, from its bucket alone (a command about one job of a million
        does not read them all); None: not in the table, or stored in a bucket other than
        its own (not by zksched's writers; `jobs list` reads every bucket)."""
        for _ in range(5):
            root = self.read_root()
            if not root.buckets:
                return None
            blob = root.buckets[bucket_index(name, len(root.buckets))]
            if not blob:
                return None
            try:
                for _blob, (jobs, _error) in self.read_blobs(root, {blob}):
                    return jobs.get(name)
            except ConcurrentChange:
                continue
        raise ConcurrentChange("the job table kept changing while being read")

    # -- writing -------------------------------------------------------------------------------

    def commit(self, base: TableRoot, jobs: Mapping[str, StoredJob]) -> TableRoot:
        """Make `jobs` the table, if it is still `base`; ConcurrentChange otherwise."""
        count = choose_bucket_count(jobs, len(base.buckets))
        buckets = split_buckets(jobs, count)
        contents = [encode_bucket(b) if b else b"" for b in buckets]
        for k, content in enumerate(contents):
            if content and self._spoiled(blob_id(content)):
                # its id's node was changed in place (blobs are immutable): written under
                # another id, for which no reader has cached what that node held
                contents[k] = encode_bucket(buckets[k], rewritten_in=base.generation + 1)
        ids = tuple(blob_id(c) if c else "" for c in contents)
        new_blobs = {
            i: c for i, c in zip(ids, contents, strict=True) if i and i not in base.buckets
        }
        root_data = json.dumps(
            {
                "format": FORMAT,
                "generation": base.generation + 1,
                "buckets": list(ids),
                "updated_at": now_utc(),
            },
            separators=(",", ":"),
        ).encode()
        self._ensure_folders()
        if base.version < 0:
            base = self._root_made_empty(base)
        size = sum(len(c) for c in new_blobs.values()) + len(root_data)
        if size <= MAX_TXN_BYTES:
            self._commit_one_transaction(base, new_blobs, root_data)
        else:
            for blob, content in new_blobs.items():  # invisible until the root names them
                self._create_blob(blob, content)
            self._switch_root(base, root_data)
        self._collect_garbage(set(ids))
        return self.read_root()

    def _spoiled(self, blob: str) -> bool:
        """Whether this store read `blob` and could not decode it."""
        cached = self._blob_cache.get(blob)
        return cached is not None and cached[1] is not None

    def _ensure_folders(self) -> None:
        wait(self._client.ensure_path_async(self._paths.blobs), self._timeout)

    def _root_made_empty(self, base: TableRoot) -> TableRoot:
        """The blobs folder's parent is the root: making the folder made the root node,
        empty, so the table is still absent, at that node's version (creating the root
        would fail and redo the whole apply). A table written meanwhile is a change."""
        fresh = self.read_root()
        if fresh.buckets or fresh.generation != base.generation:
            raise ConcurrentChange("the job table changed during the apply")
        return fresh

    def _commit_one_transaction(
        self, base: TableRoot, blobs: dict[str, bytes], root: bytes
    ) -> None:
        existing = set(wait(self._client.get_children_async(self._paths.blobs), self._timeout))
        txn = self._client.transaction()
        for blob, content in blobs.items():
            if blob not in existing:
                txn.create(self._paths.blob(blob), content)
        if base.version < 0:
            txn.create(self._paths.jobs, root)
        else:
            txn.set_data(self._paths.jobs, root, version=base.version)
        results = wait(txn.commit_async(), self._timeout)
        self._check_results(results)

    @staticmethod
    def _check_results(results: list[Any]) -> None:
        # commit() does not raise: failed operations come back as exception instances.
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return
        if any(isinstance(r, BadVersionError | NodeExistsError) for r in failures):
            raise ConcurrentChange("the job table changed during the apply")
        raise next(r for r in failures if not _is_rollback(r))

    def _create_blob(self, blob: str, content: bytes) -> None:
        with contextlib.suppress(NodeExistsError):  # same id, same content
            wait(self._client.create_async(self._paths.blob(blob), content), self._timeout)

    def _switch_root(self, base: TableRoot, root: bytes) -> None:
        try:
            if base.version < 0:
                wait(self._client.create_async(self._paths.jobs, root), self._timeout)
            else:
                wait(self._client.set_async(self._paths.jobs, root, base.version), self._timeout)
        except (BadVersionError, NodeExistsError):
            raise ConcurrentChange("the job table changed during the apply") from None

    def _collect_garbage(self, keep: set[str]) -> None:
        """Delete blobs no root names any more (a reader that loses one re-reads the root)."""
        try:
            root = self.read_root()
            keep = keep | set(root.buckets)
            children = wait(self._client.get_children_async(self._paths.blobs), self._timeout)
            pending = [
                self._client.delete_async(self._paths.blob(c)) for c in children if c not in keep
            ]
            for result in pending:
                with contextlib.suppress(NoNodeError):
                    wait(result, self._timeout)
        except Exception as exc:  # garbage can wait for the next apply
            log.warning("could not collect old job buckets: %s", exc)

    def update(
        self, change: Callable[[dict[str, StoredJob]], dict[str, StoredJob]], attempts: int = 10
    ) -> TableRoot:
        """Read-modify-write of the whole table, retried on concurrent changes."""
        for _ in range(attempts):
            root, jobs = self.read_table(whole=True)
            try:
                return self.commit(root, change(dict(jobs)))
            except ConcurrentChange:
                continue
        raise ConcurrentChange("the job table kept changing; try again")


def _is_rollback(result: Any) -> bool:
    from kazoo.exceptions import RolledBackError, RuntimeInconsistency

    return isinstance(result, RolledBackError | RuntimeInconsistency)
