"""The fire shell's ZooKeeper work (`ZkActions`, runtime/fire/zk_actions.py) against stores of
its own (`FireStores`, runtime/fire/stores.py), its pools run inline: three findings of the
simulator running the production shell (regression seeds 497, 22 and 61 in test_sim.py)."""

from __future__ import annotations

import queue
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kazoo.exceptions import ConnectionLoss

from zksched.core.fire import model as m
from zksched.core.firerecord import FireRecord
from zksched.core.jobspec import JobSpec
from zksched.runtime.clock import Clock
from zksched.runtime.fire.zk_actions import ZkActions
from zksched.zk.claims import Claimed

T0 = datetime(2026, 3, 1, 0, 0, 0, tzinfo=UTC)


class Inline:
    """A pool that runs each job at once."""

    def submit(self, fn: Callable[..., object], /, *args: Any) -> object:
        return fn(*args)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


class InlineHost:
    clock = Clock()

    def pool(self, name: str, threads: int) -> Inline:
        return Inline()

    def starters(self, name: str, threads: int) -> Inline:
        return Inline()

    def inbox(self) -> queue.SimpleQueue[Any]:
        return queue.SimpleQueue()

    def worker(self, name: str, step: Callable[[], float | None]) -> Callable[[], None]:
        return lambda: None


class Claims:
    """Fire folders in memory: each transaction (a create, a batch) gets the next zxid."""

    def __init__(self) -> None:
        self.zxid = 0
        self.transactions: list[list[str]] = []  # the fire keys of each
        self.records: dict[str, FireRecord] = {}
        self.down = False

    def _apply(self, records: list[FireRecord]) -> list[Claimed]:
        if self.down:
            raise ConnectionLoss()
        self.zxid += 1
        self.transactions.append([r.fire_key for r in records])
        for record in records:
            self.records[record.fire_key] = record
        return [
            Claimed(r.fire_key, r.with_changes(fencing_token=self.zxid), self.zxid) for r in records
        ]

    def claim(self, record: FireRecord) -> Claimed:
        return self._apply([record])[0]

    def claim_late(self, record: FireRecord, marker: str | None = None) -> Claimed:
        return self._apply([record])[0]

    def claim_batches(self, batches: list[list[FireRecord]]) -> list[list[Claimed]]:
        return [self._apply(batch) for batch in batches]


class Redelivery:
    def __init__(self, claims: Claims) -> None:
        self._claims = claims

    def known_final(self, job: str, instant: str) -> bool:
        return True

    def ensure_folder(self, job: str) -> None:
        return None

    def marker(self, record: FireRecord) -> str:
        return f"live/{record.fire_key}@{record.nonce}"

    def complete(self, claimed: Claimed, record: FireRecord) -> bool:
        if self._claims.down:
            raise ConnectionLoss()
        self._claims.records[record.fire_key] = record
        return True


class Stores:
    def __init__(self) -> None:
        self.claims = Claims()
        self.redelivery = Redelivery(self.claims)
        self.leases = self.triggers = None
        self.up = True

    def connected(self) -> bool:
        return self.up


def shell(**delivery: Any) -> tuple[ZkActions, Stores, list[tuple[str, m.JobEvent]]]:
    stores, posted = Stores(), []
    actions = ZkActions(
        stores,  # type: ignore[arg-type]
        "m-1",
        InlineHost(),  # type: ignore[arg-type]
        lambda job, event: posted.append((job, event)),
        lambda job: JobSpec(name=job, schedule="* * * * *", command=("true",), **delivery),
    )
    return actions, stores, posted


def at(seconds: int) -> datetime:
    return T0.replace(second=seconds)


def test_two_claims_of_one_job_in_one_step_get_tokens_of_their_own_in_instant_order() -> None:
    """A trigger and the job's scheduled instant, claimed in one step, went in one
    transaction and got one fencing token (seed 497: `[tokens] token 856 given twice`)."""
    actions, stores, posted = shell()
    actions.claim(
        [
            m.Claim("a", at(3), "trigger", late=False),
            m.Claim("b", at(4), "scheduled", late=False),
            m.Claim("a", at(4), "scheduled", late=False),
        ],
        session=7,
    )
    assert stores.claims.transactions == [
        ["a@2026-03-01T00:00:03Z", "b@2026-03-01T00:00:04Z"],
        ["a@2026-03-01T00:00:04Z"],
    ]
    tokens = {(job, e.instant): e.token for job, e in posted if isinstance(e, m.ClaimAnswered)}
    assert len(tokens) == 3
    assert tokens[("a", at(3))] < tokens[("a", at(4))]


def test_a_skip_record_that_fails_while_disconnected_is_recorded_once_connected() -> None:
    """A skip record whose create failed while the connection was down was given up: its
    instant was left without a record (seed 22: `[lost] ... no record covers it`)."""
    actions, stores, _ = shell()
    stores.claims.down, stores.up = True, False
    skip = m.RecordSkip("a", at(9), "scheduled", m.SkipReason.OUTSIDE_CATCHUP_WINDOW)
    actions.record_skip(skip, session=7)
    assert actions.has_chores()  # kept, not given up
    stores.claims.down, stores.up = False, True
    actions.unwritten.flush()  # the engine's chores, once connected
    assert stores.claims.records["a@2026-03-01T00:00:09Z"].state == "skipped"
    assert not actions.has_chores()


def test_an_at_least_once_result_written_after_a_lost_connection_is_reported_then() -> None:
    """Its write failed on the connection: kept and written later, but never reported, so
    the fire stayed in hand and the member never ran its orphan again (seed 61: `[lost]
    ... orphaned by session 49 ..., never run again`)."""
    actions, stores, posted = shell(delivery="at-least-once")
    actions.claim([m.Claim("a", at(1), "scheduled", late=True)], session=7)
    assert any(isinstance(e, m.ClaimAnswered) for _, e in posted)
    stores.claims.down = True
    actions.write_result(m.WriteResult("a", at(1), "ok"))
    assert not [e for _, e in posted if isinstance(e, m.ResultWritten)]  # not written yet
    stores.claims.down = False
    actions.unwritten.flush()
    assert stores.claims.records["a@2026-03-01T00:00:01Z"].state == "ok"
    assert [e for _, e in posted if isinstance(e, m.ResultWritten)] == [m.ResultWritten(at(1))]
