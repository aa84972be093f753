"""Skip records: an instant the fire core decided not to run (or a range of them, after an
outage) gets a record of its own, created like a claim: the create is the gate, so an
instant that has a record already (run, or claimed elsewhere) keeps it. Like a result, a
skip record is written until it lands: one that fails while the connection is down is kept
and tried again once connected (else its instants would be left without a record)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from zksched.core.fire import model as m
from zksched.core.firekey import format_utc
from zksched.core.firerecord import FireRecord
from zksched.runtime.clock import Clock
from zksched.runtime.fire.pruning import HistoryPruner
from zksched.runtime.fire.stores import FireStore
from zksched.runtime.fire.tuning import SKIP_RECORD_TRIES
from zksched.zk.claims import Claimed

log = logging.getLogger("zksched.fire")


class SkipRecords:
    def __init__(
        self,
        connected: Callable[[], bool],
        claims: FireStore,
        pruner: HistoryPruner,
        member_id: str,
        clock: Clock,
        submit: Callable[..., None],
    ) -> None:
        self._connected = connected
        self._claims = claims
        self._pruner = pruner
        self._member_id = member_id
        self._clock = clock
        self._submit = submit
        self._mutex = threading.Lock()
        self._kept: list[FireRecord] = []  # not recorded yet: tried again once connected

    def record(self, action: m.RecordSkip, session: int) -> None:
        extra = {}
        if action.covers_from is not None:
            extra = {"covers_from": format_utc(action.covers_from), "count": action.count}
        record = FireRecord(
            job=action.job,
            scheduled=format_utc(action.instant),
            member_id=self._member_id,
            session=session,
            nonce=uuid.uuid4().hex[:16],
            state="skipped",
            claimed_at=self._clock.iso(),
            kind=action.kind,
            skip_reason=action.reason.value,
            extra=extra,
        )
        self._submit(self._create, record, SKIP_RECORD_TRIES)

    def _create(self, record: FireRecord, tries: int) -> None:
        try:
            if isinstance(self._claims.claim(record), Claimed):  # else: it has its record
                self._pruner.note(record.job, record.scheduled)
        except Exception as exc:
            if tries > 1 and self._connected():
                self._submit(self._create, record, tries - 1)
                return
            log.warning("could not record the skip of %s yet (%s)", record.fire_key, exc)
            with self._mutex:
                self._kept.append(record)

    def kept(self) -> bool:
        with self._mutex:
            return bool(self._kept)

    def retry(self) -> None:
        """Try again the skip records kept (called while connected)."""
        with self._mutex:
            records, self._kept = self._kept, []
        for record in records:
            self._submit(self._create, record, SKIP_RECORD_TRIES)
