"""The fire shell's side of at-least-once delivery (zk/redelivery.py has the why): claims
with a live marker, orphans found when a job's history is read, claims of them again, and
results written with the marker's delete. Jobs with the default delivery never come here.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from zksched.core.firekey import format_utc, parse_utc
from zksched.core.firerecord import FireRecord
from zksched.runtime.fire.stores import FireStore, RedeliveryStore
from zksched.zk.claims import AlreadyClaimed, Claimed
from zksched.zk.redelivery import Orphan

log = logging.getLogger("zksched.fire")


class RedeliveryIO:
    def __init__(self, store: RedeliveryStore, claims: FireStore) -> None:
        self._claims = claims
        self.zk = store
        self._mutex = threading.Lock()
        self._orphans: dict[tuple[str, datetime], Orphan] = {}  # found, not claimed again

    def orphans(self, job: str, since: datetime) -> tuple[tuple[datetime, int], ...]:
        """The job's orphaned claims from `since` on, as (instant, its record's attempt);
        kept for the claims again that follow. Raises kazoo errors."""
        found = self.zk.orphans(job, format_utc(since))
        out = []
        with self._mutex:
            # the last scan's answer replaces the job's earlier one (no entry outlives it)
            for key in [k for k in self._orphans if k[0] == job]:
                del self._orphans[key]
            for orphan in found:
                instant = parse_utc(orphan.record.scheduled)
                self._orphans[(job, instant)] = orphan
                out.append((instant, orphan.record.attempt or 1))
        for orphan in found:
            log.warning(
                "%s: claimed by %s (attempt %d), whose session ended before its result; "
                "its owner runs it again (delivery = at-least-once)",
                orphan.record.fire_key,
                orphan.record.member_id,
                orphan.record.attempt or 1,
                extra={"event": "orphan", "job": job},
            )
        return tuple(out)

    def create(self, record: FireRecord, attempt: int) -> Claimed | AlreadyClaimed:
        """Claim with a live marker: a new record (attempt 1, through the late claim's
        checks), or an orphan again (attempt > 1). Raises when the outcome is unknown."""
        self.zk.ensure_folder(record.job)
        if attempt == 1:
            return self._claims.claim_late(record, self.zk.marker(record))
        key = (record.job, parse_utc(record.scheduled))
        with self._mutex:
            orphan = self._orphans.get(key)
        if orphan is None:  # not found by this member's planning: never claimed on a guess
            return AlreadyClaimed(None)
        again = record.with_changes(
            kind=orphan.record.kind,
            attempt=attempt,
            attempts=[*(orphan.record.attempts or []), _abandoned(orphan.record)],
        )
        outcome = self.zk.claim(orphan, again)
        with self._mutex:
            self._orphans.pop(key, None)
        if isinstance(outcome, Claimed):
            log.info(
                "%s claimed again (attempt %d, fencing token %d)",
                again.fire_key,
                attempt,
                outcome.fencing_token,
                extra={"event": "reclaimed", "job": record.job},
            )
        return outcome

    def complete(self, claimed: Claimed, record: FireRecord) -> None:
        if not self.zk.complete(claimed, record):
            log.warning(
                "%s: result %s not written: the fire was claimed again after this "
                "member's session ended (the new run's result stands)",
                record.fire_key,
                record.state,
                extra={"event": "result-superseded", "job": record.job},
            )


def _abandoned(record: FireRecord) -> dict[str, object]:
    """What the history keeps of an attempt whose claimer's session ended before its
    result (whether its command had started is not known)."""
    entry: dict[str, object] = {
        "attempt": record.attempt or 1,
        "state": "abandoned",
        "member_id": record.member_id,
        "claimed_at": record.claimed_at,
    }
    if record.fencing_token is not None:
        entry["fencing_token"] = record.fencing_token
    return entry
