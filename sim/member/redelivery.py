"""At-least-once delivery in the simulated shell, as zk/redelivery.py does it: a live
marker (ephemeral, named by the instant and the claim's nonce) created with the claim and
deleted with the result; orphans (`running` records with no marker) found and claimed again
as the next attempt; a result whose marker is gone written only over a record still ours.
Each function below runs as one step of the ZooKeeper model (a transaction)."""

from __future__ import annotations

from datetime import datetime

from sim.member.base import MemberBase
from sim.records import decode, fires_of, record_path
from sim.zkmodel import NoNode, ZkModel
from zksched.core.firekey import format_utc, parse_utc


def live_of(job: str) -> str:
    return f"/live/{job}"


def marker_path(job: str, instant: datetime, nonce: str) -> str:
    return f"{live_of(job)}/{format_utc(instant)}@{nonce}"


def live_instants(zk: ZkModel, session: int, job: str) -> set[str]:
    try:
        return {n.rsplit("@", 1)[0] for n in zk.get_children(session, live_of(job))}
    except NoNode:
        return set()


def attempt_of(fields: list[str]) -> int:
    return int(fields[8]) if len(fields) > 8 and fields[8] else 1


class Redelivery(MemberBase):
    """The at-least-once parts of claims, results and reads (a part of `SimMember`)."""

    def _at_least_once(self, job: str) -> bool:
        entry = self.table.get(job)
        return entry is not None and entry[0].delivery == "at-least-once"

    def _orphans(
        self, zk: ZkModel, session: int, job: str, since: datetime
    ) -> tuple[tuple[datetime, int], ...]:
        try:
            names = zk.get_children(session, fires_of(job))
        except NoNode:
            return ()
        live, low = live_instants(zk, session, job), format_utc(since)
        found = []
        for name in sorted(n for n in names if n >= low and n not in live):
            fields = decode(zk.get(session, f"{fires_of(job)}/{name}")[0])
            if fields[0] == "running":
                found.append((parse_utc(name), attempt_of(fields)))
        return tuple(found)

    def _claim_again(
        self, zk: ZkModel, session: int, job: str, instant: datetime, data: bytes, nonce: str
    ) -> tuple[str, int, str]:
        """An orphan claimed again: only while it is one (running, no marker)."""
        path = record_path(job, instant)
        try:
            old, stat = zk.get(session, path)
        except NoNode:
            return "taken", 0, "a pruned record"
        fields = decode(old)
        if fields[3] == nonce:  # a retry of ours whose reply was lost: landed
            return "created", stat.mzxid, ""
        if fields[0] != "running" or format_utc(instant) in live_instants(zk, session, job):
            return "taken", 0, fields[1]
        new = zk.set(session, path, data, stat.version)
        zk.create(session, marker_path(job, instant, nonce), b"", True, False, True)
        return "created", new.mzxid, ""

    def _complete(
        self, zk: ZkModel, session: int, job: str, instant: datetime, data: bytes, nonce: str
    ) -> None:
        """The result with the marker's delete; without a marker, only over our record."""
        path, marker = record_path(job, instant), marker_path(job, instant, nonce)
        if zk.exists(session, marker) is not None:
            zk.set(session, path, data)
            zk.delete(session, marker)
            return
        current, stat = zk.get(session, path)
        if decode(current)[3] == nonce:
            zk.set(session, path, data, stat.version)
        else:
            self.world.note(self.name, f"{job}@{format_utc(instant)}: result superseded")
