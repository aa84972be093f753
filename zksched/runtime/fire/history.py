"""What the fire core reads of a job's history, on a pool thread (zk_actions.py submits): the
instants of its records and its pruning horizon (to plan a catch-up), the skip ranges of
chosen records, and whether its newest record says a run is going. Each answer is posted
back as an event; a failed read is an answer too (`ok=False`), never an exception."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from zksched.core.fire import model as m
from zksched.core.firekey import format_utc, parse_utc
from zksched.runtime.fire.pruning import HistoryPruner
from zksched.runtime.fire.redelivery import RedeliveryIO
from zksched.runtime.fire.stores import FireStore

log = logging.getLogger("zksched.fire")


class HistoryReads:
    def __init__(
        self,
        claims: FireStore,
        pruner: HistoryPruner,
        post: Callable[[str, m.JobEvent], None],
        redelivery: RedeliveryIO | None = None,
    ) -> None:
        self._redelivery = redelivery
        self._claims = claims
        self._pruner = pruner
        self._post = post

    def read_history(self, job: str, orphans_since: datetime | None = None) -> None:
        """`orphans_since`: also the job's orphaned claims (delivery = at-least-once)."""
        orphans: tuple[tuple[datetime, int], ...] = ()
        try:
            names, horizon = self._claims.history(job)
            if orphans_since is not None and self._redelivery is not None:
                orphans = self._redelivery.orphans(job, orphans_since)
        except Exception as exc:
            log.warning("cannot read the history of %s yet (%s)", job, type(exc).__name__)
            self._post(job, m.HistoryRead(ok=False))
            return
        self._pruner.remember(job, names)
        instants = [parse_utc(name) for name in names]  # instants only (FireClaims.instants)
        pruned = None if horizon is None else parse_utc(horizon)
        self._post(job, m.HistoryRead(tuple(sorted(instants)), pruned, orphans=orphans))

    def find_orphans(self, job: str, since: datetime) -> None:
        assert self._redelivery is not None
        try:
            orphans = self._redelivery.orphans(job, since)
        except Exception as exc:
            log.debug("orphans of %s not read (%s)", job, type(exc).__name__)
            self._post(job, m.OrphansFound(ok=False))
            return
        self._post(job, m.OrphansFound(orphans))

    def read_ranges(self, job: str, instants: tuple[datetime, ...]) -> None:
        try:
            records = self._claims.read_many(job, [format_utc(i) for i in instants])
        except Exception:
            self._post(job, m.RangesRead(ok=False))
            return
        ranges = []
        for record in records.values():
            if record is None or record.state != "skipped":
                continue
            try:
                first = parse_utc(str(record.extra.get("covers_from", record.scheduled)))
                ranges.append((first, parse_utc(record.scheduled)))
            except (ValueError, TypeError):
                continue
        self._post(job, m.RangesRead(tuple(ranges)))

    def holder_runs(self, job: str) -> bool:
        """Whether the job's newest fire record says a run is going (claimed, not ended);
        unknown (a read failed): not, so its instants go to a catch-up, not skipped for good."""
        try:
            newest = self._claims.newest([job])
        except Exception:
            return False
        if job not in newest:
            return False
        record = newest[job]
        return record is None or record.state == "running"
