"""The fire folders in the ZooKeeper model: the simulator's `FireStore`
(zksched/runtime/fire/stores.py), call for call what zk/claims.py and zk/history.py do.

A claim is a create whose reply may be lost: the record carries the attempt's nonce, so a
create found later with our nonce is ours. Plain claims go in transactions with a write of
the fence node (its mzxid: the fencing token). A late claim reads the folder first: refused
at or behind the pruning horizon and inside a newer skip range, then created with a check
of the folder's version. Results are unconditional writes; a withdrawal deletes the bare
claim (version 0); pruning raises the horizon before it deletes. Paths: `sim/records.py`.
"""

from __future__ import annotations

import contextlib
import json

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from sim.member.host import SimHost, create_stat, delete, ensure, get, multi, set_data
from sim.member.host import children as children_of
from sim.records import FENCE, fires_of, record_at, recorded
from sim.zkmodel import (
    Check,
    Create,
    Delete,
    NodeExists,
    NoNode,
    Op,
    SetData,
    Stat,
    ZkError,
)
from zksched.core.firerecord import FireRecord
from zksched.zk.claims import (
    LATE_CLAIM_ATTEMPTS,
    AlreadyClaimed,
    ClaimConflict,
    Claimed,
    ClaimReply,
)
from zksched.zk.fire_reader import parse_fire
from zksched.zk.firefolder import (
    UNREADABLE_HORIZON,
    effective_horizon,
    stored_horizon,
)

Outcome = Claimed | AlreadyClaimed


class SimFireClaims:
    def __init__(self, host: SimHost) -> None:
        self._call = host.call
        self._clock = host.clock
        self._fence_ready = False
        self._folders: set[str] = set()  # jobs whose fire folder is known to exist

    # -- folders ----------------------------------------------------------------------------

    def _ensure_fence(self) -> None:
        if not self._fence_ready:
            with contextlib.suppress(NodeExistsError):
                self._call(ensure(FENCE))
            self._fence_ready = True

    def ensure_folder(self, job: str) -> None:
        if job not in self._folders:
            self._ensure_folders([job])

    def ensure_folders(self, jobs: list[str]) -> list[str]:
        missing = [job for job in jobs if job not in self._folders]
        return self._ensure_folders(missing) if missing else []

    def _ensure_folders(self, jobs: list[str]) -> list[str]:
        created = []
        for job in jobs:
            try:
                self._call(ensure(fires_of(job)))
                created.append(job)
            except NodeExistsError:
                pass
            self._folders.add(job)
        return created

    # -- claims -----------------------------------------------------------------------------

    def claim(self, record: FireRecord) -> Outcome:
        path, data = record_at(record.job, record.scheduled), record.to_json()
        for _ in range(2):  # one create a try: never makepath (its create would go again)
            try:
                stat = self._call(create_stat(path, data))
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

    def claim_late(self, record: FireRecord, marker: str | None = None) -> Outcome:
        folder, path = fires_of(record.job), record_at(record.job, record.scheduled)
        for _ in range(LATE_CLAIM_ATTEMPTS):
            try:
                raw, stat = self._call(get(folder))
            except NoNodeError:
                self._folders.discard(record.job)
                self.ensure_folder(record.job)  # its first fire: nothing was ever pruned
                continue
            children = self._call(children_of(folder))
            named = recorded(children, self._clock.now())
            horizon = effective_horizon(stored_horizon(raw, stat.version), 0, named)
            if horizon is not None and horizon >= record.scheduled:
                return AlreadyClaimed(None, pruned=True)
            newer = sorted(c for c in named if c > record.scheduled)
            if (
                record.scheduled not in children
                and newer
                and self._covers(record.job, newer[0], record.scheduled)
            ):
                return AlreadyClaimed(None, passed=True)
            self._ensure_fence()
            ops: list[Op] = [Check(folder, stat.version), Create(path, record.to_json())]
            if marker is not None:
                ops.append(Create(marker, b"", ephemeral=True))
            ops.append(SetData(FENCE, b""))
            results = self._call(multi(ops))
            if not any(isinstance(r, ZkError) for r in results):
                self._folders.add(record.job)
                token = _stat(results[-1]).mzxid
                return Claimed(path, record.with_changes(fencing_token=token), token)
            if isinstance(results[1], NodeExists):
                outcome = self.resolve(record)
                if outcome is not None:
                    return outcome
            if isinstance(results[-1], NoNode):
                self._fence_ready = False
        raise ClaimConflict(f"{folder} kept changing while {record.scheduled} was claimed")

    def _covers(self, job: str, node: str, instant: str) -> bool:
        found = self.read(job, node)
        if found is None or found.state != "skipped" or (found.job, found.scheduled) != (job, node):
            return False
        covers_from = found.extra.get("covers_from")
        return isinstance(covers_from, str) and covers_from <= instant

    def claim_batches(self, batches: list[list[FireRecord]]) -> list[ClaimReply]:
        self._ensure_fence()
        missing = sorted({r.job for batch in batches for r in batch} - self._folders)
        if missing:
            self._ensure_folders(missing)
        replies: list[ClaimReply] = []
        for records in batches:
            paths = [record_at(r.job, r.scheduled) for r in records]
            ops: list[Op] = [Create(p, r.to_json()) for p, r in zip(paths, records, strict=True)]
            ops.append(SetData(FENCE, b""))
            try:
                results = self._call(multi(ops))
            except Exception as exc:  # the transaction may have applied
                replies.append(exc)
                continue
            if any(isinstance(r, ZkError) for r in results):
                if any(isinstance(r, NoNode) for r in results):
                    self._folders.clear()
                    self._fence_ready = False
                replies.append(None)
                continue
            token = _stat(results[-1]).mzxid
            replies.append(
                [
                    Claimed(p, r.with_changes(fencing_token=token), token)
                    for p, r in zip(paths, records, strict=True)
                ]
            )
        return replies

    def resolve(self, record: FireRecord) -> Outcome | None:
        path = record_at(record.job, record.scheduled)
        try:
            raw, stat = self._call(get(path))
        except NoNodeError:
            return None
        existing = parse_fire(raw)
        if existing is None:
            return AlreadyClaimed(None)
        if existing.nonce == record.nonce:
            token = stat.czxid if stat.version == 0 else stat.mzxid
            return Claimed(path, existing.with_changes(fencing_token=token), token, stat.version)
        return AlreadyClaimed(existing)

    def withdraw(self, claimed: Claimed) -> bool:
        try:
            self._call(delete(claimed.path, 0))
        except (NoNodeError, BadVersionError):
            return False
        return True

    def note_attempt(self, claimed: Claimed, record: FireRecord, version: int) -> bool:
        try:
            self._call(set_data(claimed.path, record.to_json(), version))
        except (NoNodeError, BadVersionError):
            return False
        return True

    def complete(self, claimed: Claimed, record: FireRecord) -> bool:
        try:
            self._call(set_data(claimed.path, record.to_json()))
        except NoNodeError:
            return False
        return True

    def complete_many(self, results: list[tuple[Claimed, FireRecord]]) -> bool:
        ops: list[Op] = [SetData(c.path, r.to_json()) for c, r in results]
        outcome = self._call(multi(ops))
        return not any(isinstance(r, ZkError) for r in outcome)

    # -- history ----------------------------------------------------------------------------

    def instants(self, job: str) -> list[str]:
        try:
            names = self._call(children_of(fires_of(job)))
        except NoNodeError:
            return []
        return sorted(names)  # every name here is an instant

    def history(self, job: str) -> tuple[list[str], str | None]:
        try:
            names = sorted(self._call(children_of(fires_of(job))))
        except NoNodeError:  # no fire folder: no records and no horizon (one request)
            return [], None
        return names, self.pruned_through(job, names)

    def read(self, job: str, instant: str) -> FireRecord | None:
        try:
            raw, _ = self._call(get(record_at(job, instant)))
        except NoNodeError:
            return None
        return parse_fire(raw)

    def newest(self, jobs: list[str]) -> dict[str, FireRecord | None]:
        out: dict[str, FireRecord | None] = {}
        for job in jobs:
            try:
                children = self._call(children_of(fires_of(job)))
            except NoNodeError:
                continue
            named = recorded(children, self._clock.now())
            if named:
                out.update(self.read_many(job, [max(named)]))
        return out

    def read_many(self, job: str, instants: list[str]) -> dict[str, FireRecord | None]:
        out: dict[str, FireRecord | None] = {}
        for instant in instants:
            try:
                raw, _ = self._call(get(record_at(job, instant)))
            except NoNodeError:
                continue
            out[instant] = parse_fire(raw)
        return out

    def pruned_through(self, job: str, records: list[str]) -> str | None:
        try:
            raw, stat = self._call(get(fires_of(job)))
        except NoNodeError:
            return None
        return effective_horizon(stored_horizon(raw, stat.version), 0, records)

    def prune(self, job: str, instants: list[str]) -> bool:
        if not instants:
            return True
        folder, newest = fires_of(job), max(instants)
        raw, stat = self._call(get(folder))
        stored = stored_horizon(raw, stat.version)
        current = effective_horizon(stored, 0, instants)
        if stored == UNREADABLE_HORIZON or current is None or current < newest:
            body = json.dumps({"pruned_through": max(newest, current or newest)}).encode()
            try:
                self._call(set_data(folder, body, stat.version))
            except BadVersionError:
                return False
        ops: list[Op] = [Delete(record_at(job, i)) for i in instants]
        results = self._call(multi(ops))
        if any(isinstance(r, ZkError) for r in results):
            for instant in instants:
                with contextlib.suppress(NoNodeError):
                    self._call(delete(record_at(job, instant)))
        return True


def _stat(result: object) -> Stat:
    assert isinstance(result, Stat)
    return result
