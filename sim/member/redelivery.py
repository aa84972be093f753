"""At-least-once's live markers in the ZooKeeper model: the simulator's `RedeliveryStore`
(zksched/runtime/fire/stores.py), call for call what zk/redelivery.py does.

A claim of an at-least-once job creates, in its transaction, an ephemeral marker named by
the instant and the claim's nonce; the result goes in one transaction with the marker's
delete. A `running` record with no marker is an orphan (its claimer's session ended), claimed
again by a version-checked write with a new marker; a result whose marker is gone writes
only over a record still carrying its nonce.
"""

from __future__ import annotations

import contextlib

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sim.member.host import SimHost, children, delete, ensure, get, multi, set_data
from sim.member.store import SimFireClaims
from sim.records import FENCE, fires_of, live_of, record_at, recorded
from sim.zkmodel import Create, Delete, NoNode, Op, RolledBack, SetData, Stat, ZkError
from zksched.core.firerecord import FireRecord
from zksched.zk.claims import AlreadyClaimed, Claimed
from zksched.zk.fire_reader import parse_fire
from zksched.zk.redelivery import MAX_ORPHAN_READS, Orphan


class SimRedelivery:
    def __init__(self, host: SimHost, claims: SimFireClaims) -> None:
        self._call = host.call
        self._clock = host.clock
        self._claims = claims
        self._folders: set[str] = set()
        self._final: dict[str, set[str]] = {}  # records read final, not read again

    def marker(self, record: FireRecord) -> str:
        return f"{live_of(record.job)}/{record.scheduled}@{record.nonce}"

    def ensure_folder(self, job: str) -> None:
        if job not in self._folders:
            with contextlib.suppress(NodeExistsError):
                self._call(ensure(live_of(job)))
            self._folders.add(job)

    def known_final(self, job: str, instant: str) -> bool:
        return instant in self._final.get(job, ())

    def orphans(self, job: str, since: str) -> list[Orphan]:
        try:
            names = self._call(children(fires_of(job)))
        except NoNodeError:
            return []
        try:
            markers = self._call(children(live_of(job)))
        except NoNodeError:
            markers = []
        live = {name.rsplit("@", 1)[0] for name in markers}
        final = {n for n in self._final.get(job, ()) if n >= since}
        named = recorded(names, self._clock.now())
        candidates = sorted(n for n in named if n >= since and n not in live and n not in final)
        found = []
        for name in candidates[-MAX_ORPHAN_READS:]:
            try:
                raw, stat = self._call(get(record_at(job, name)))
            except NoNodeError:
                continue
            record = parse_fire(raw)
            if record is None:
                continue
            if record.state != "running":
                final.add(name)
            elif record.job == job and record.scheduled == name:
                found.append(Orphan(record, stat.version))
        self._final[job] = final
        return found

    def claim(self, orphan: Orphan, record: FireRecord) -> Claimed | AlreadyClaimed:
        self.ensure_folder(record.job)
        path = record_at(record.job, record.scheduled)
        ops: list[Op] = [
            SetData(path, record.to_json(), orphan.version),
            Create(self.marker(record), b"", ephemeral=True),
            SetData(FENCE, b""),
        ]
        results = self._call(multi(ops))
        if not any(isinstance(r, ZkError) for r in results):
            last = results[-1]
            assert isinstance(last, Stat)
            claimed = record.with_changes(fencing_token=last.mzxid)
            return Claimed(path, claimed, last.mzxid, orphan.version + 1)
        if isinstance(results[0], NoNode):
            return AlreadyClaimed(None, pruned=True)
        if isinstance(results[2], NoNode):
            with contextlib.suppress(NodeExistsError):
                self._call(ensure(FENCE))
        return AlreadyClaimed(self._claims.read(record.job, record.scheduled))

    def complete(self, claimed: Claimed, record: FireRecord) -> bool:
        ops: list[Op] = [
            SetData(claimed.path, record.to_json()),
            Delete(self.marker(claimed.record)),
        ]
        results = self._call(multi(ops))
        if not any(isinstance(r, ZkError) for r in results):
            return True
        for _ in range(3):
            ours = self._claims.resolve(claimed.record)
            if not isinstance(ours, Claimed):
                return False
            try:
                self._call(set_data(claimed.path, record.to_json(), ours.version))
                return True
            except BadVersionError:
                continue
        return False

    def withdraw(self, claimed: Claimed) -> bool:
        if claimed.version > 0:
            with contextlib.suppress(NoNodeError):
                self._call(delete(self.marker(claimed.record)))
            return True
        ops: list[Op] = [
            Delete(claimed.path, claimed.version),
            Delete(self.marker(claimed.record)),
        ]
        results = self._call(multi(ops))
        if not any(isinstance(r, ZkError) for r in results):
            return True
        if isinstance(results[1], NoNode) and isinstance(results[0], RolledBack):
            return self._claims.withdraw(claimed)
        return False
