"""Skip records: an instant the fire core decided not to run (or a range of them, after an
outage) gets a record of its own, created like a claim: the create is the gate, so an
instant that has a record already (run, or claimed elsewhere) keeps it."""

from __future__ import annotations

import logging
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
            else:
                log.warning("could not record the skip of %s (%s)", record.fire_key, exc)
