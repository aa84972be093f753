"""The fire core's ZooKeeper work: claims, leases, history, skip records and results.

Each method carries out one action of the core (zksched/core/fire) on a pool thread, with
bounded calls, and posts its answer back as an event; none decides anything. What the
answers mean:
- a claim: CREATED (ours, with its fencing token; a create whose reply was lost and that
  carries our nonce counts), TAKEN (another record, or a late claim behind a newer record
  or the pruning horizon), UNKNOWN (the reply was lost: resolved later);
- a withdrawal (the record of a claim of ours that never started, deleted while it is
  still the bare claim): done, or not (the reply was lost: tried again);
- a lease: TAKEN, BUSY (another contender after the wait the core allowed), UNKNOWN.

Speed lives here, not in the core: claims the core asks for together go in transactions
of up to `CLAIM_BATCH` (one round trip); first fires' lock and fire folders are made
together before their leases are taken; results are written in batches, and wait while
commands are being started (`ResultWriter`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from zksched.core.fire import model as m
from zksched.core.firekey import FireId, format_utc
from zksched.core.firerecord import FireRecord
from zksched.core.jobspec import JobSpec
from zksched.runtime.fire.history import HistoryReads
from zksched.runtime.fire.leases import LeaseIO
from zksched.runtime.fire.pruning import HistoryPruner
from zksched.runtime.fire.redelivery import RedeliveryIO
from zksched.runtime.fire.results import ResultWriter, UnwrittenResults
from zksched.runtime.fire.skip_records import SkipRecords
from zksched.runtime.fire.stores import FireStores
from zksched.runtime.fire.tuning import CLAIM_BATCH, IO_THREADS, LOCK_THREADS
from zksched.runtime.host import Host
from zksched.zk.claims import AlreadyClaimed, Claimed

log = logging.getLogger("zksched.fire")

Post = Callable[[str, m.JobEvent], None]


class ZkActions:
    def __init__(
        self,
        stores: FireStores,
        member_id: str,
        host: Host,
        post: Post,
        spec_of: Callable[[str], JobSpec | None] = lambda _job: None,
        hold_results: Callable[[], bool] = lambda: False,
    ) -> None:
        """`hold_results()`: whether commands are being started (results then wait a
        moment, see results.py)."""
        self._member_id = member_id
        self._clock = clock = host.clock
        self._post = post
        self.claims = stores.claims
        self.redelivery = RedeliveryIO(stores.redelivery, self.claims)
        self._spec_of = spec_of
        self._triggers = stores.triggers
        self.pruner = HistoryPruner(self.claims, clock, self.redelivery.zk.known_final)
        self.history = HistoryReads(self.claims, self.pruner, post, self.redelivery)
        self._io = host.pool("zksched-io", IO_THREADS)
        self._mutex = threading.Lock()
        self._records: dict[FireId, FireRecord] = {}  # our claim attempts in flight
        self._claimed: dict[FireId, Claimed] = {}  # our claims, until their result is written
        lockers = host.pool("zksched-lock", LOCK_THREADS)
        self.leases = LeaseIO(stores.leases, lockers, post, self.history.holder_runs)
        self.skips = SkipRecords(
            stores.connected, self.claims, self.pruner, member_id, clock, self._submit
        )
        self.unwritten = UnwrittenResults(
            self.claims, self.redelivery, self._at_least_once, self.skips.retry
        )
        self._results = ResultWriter(
            self.claims,
            self.unwritten.write,
            self.unwritten.keep,
            hold=hold_results,
            clock=clock,
            worker=host.worker,
        )

    # -- claims -----------------------------------------------------------------------------

    def claim(self, claims: list[m.Claim], session: int) -> None:
        """The claims the core asked for in one step: plain ones in transactions, late
        ones one by one (each reads its fire folder first)."""
        plain = [c for c in claims if not c.late and not self._at_least_once(c.job)]
        late = [c for c in claims if c.late or self._at_least_once(c.job)]
        for start in range(0, len(plain), CLAIM_BATCH):
            self._submit(self._claim_batch, plain[start : start + CLAIM_BATCH], session)
        for claim in late:
            self._submit(self._claim_one, claim, session)

    def _record(self, job: str, instant: datetime, session: int, kind: m.FireKind) -> FireRecord:
        # every attempt at one instant carries the nonce of the first: whichever of them
        # landed, resolving it finds it ours (an attempt is never mistaken for another's)
        with self._mutex:
            earlier = self._records.get((job, instant))
        record = FireRecord(
            job=job,
            scheduled=format_utc(instant),
            member_id=self._member_id,
            session=session,
            nonce=earlier.nonce if earlier is not None else uuid.uuid4().hex[:16],
            state="running",
            claimed_at=self._clock.iso(),
            kind=kind,
        )
        with self._mutex:
            self._records[(job, instant)] = record
        return record

    def _claim_batch(self, claims: list[m.Claim], session: int) -> None:
        # a transaction's claims share its zxid, their fencing token: one claim of a job
        # in it, the job's later instants claimed after it, in order (larger tokens)
        first: dict[str, m.Claim] = {}
        again = [c for c in claims if first.setdefault(c.job, c) is not c]
        self._claim_together(list(first.values()), session)
        for claim in again:
            self._claim_one(claim, session)

    def _claim_together(self, claims: list[m.Claim], session: int) -> None:
        if len(claims) == 1:
            self._claim_one(claims[0], session)
            return
        records = [self._record(c.job, c.instant, session, c.kind) for c in claims]
        try:
            (outcome,) = self.claims.claim_batches([records])
        except Exception as exc:  # nothing sent: each is tried on its own
            log.debug("batch of %d claims not sent (%s)", len(claims), type(exc).__name__)
            outcome = None
        if isinstance(outcome, list):
            for claim, claimed in zip(claims, outcome, strict=True):
                self._answer_created(claim.job, claim.instant, claimed)
            return
        for claim in claims:  # not applied (one was taken) or unknown: each on its own
            self._claim_one(claim, session, known=isinstance(outcome, Exception))

    def _claim_one(self, claim: m.Claim, session: int, known: bool = False) -> None:
        job, instant = claim.job, claim.instant
        record = self._records.get((job, instant)) if known else None
        if record is None:
            record = self._record(job, instant, session, claim.kind)
        try:
            if known:  # a batch whose outcome is unknown: did this one land?
                found = self.claims.resolve(record)
                if found is None:
                    found = self._create(record, claim)
            else:
                found = self._create(record, claim)
        except Exception as exc:
            log.warning("claim of %s@%s failed (%s)", job, record.scheduled, type(exc).__name__)
            self._post(job, m.ClaimAnswered(instant, m.ClaimOutcome.UNKNOWN))
            return
        self._answer(job, instant, found)

    def _create(self, record: FireRecord, claim: m.Claim) -> Claimed | AlreadyClaimed:
        if self._at_least_once(record.job):
            return self.redelivery.create(record, claim.attempt)
        if claim.late:
            return self.claims.claim_late(record)
        return self.claims.claim(record)

    def _at_least_once(self, job: str) -> bool:
        spec = self._spec_of(job)
        return spec is not None and spec.delivery == "at-least-once"

    def resolve(self, job: str, instant: datetime) -> None:
        self._submit(self._resolve, job, instant)

    def _resolve(self, job: str, instant: datetime) -> None:
        record = self._records.get((job, instant))
        if record is None:  # nothing was ever sent for it
            self._post(job, m.ClaimAnswered(instant, m.ClaimOutcome.ABSENT))
            return
        try:
            found = self.claims.resolve(record)
        except Exception:
            self._post(job, m.ClaimAnswered(instant, m.ClaimOutcome.UNKNOWN))
            return
        if found is None:
            self._post(job, m.ClaimAnswered(instant, m.ClaimOutcome.ABSENT))
        else:
            self._answer(job, instant, found)

    def _answer(self, job: str, instant: datetime, found: Claimed | AlreadyClaimed) -> None:
        if isinstance(found, Claimed):
            self._answer_created(job, instant, found)
            return
        with self._mutex:
            self._records.pop((job, instant), None)
        if found.pruned:
            holder = "a record behind the job's pruning horizon"
        elif found.passed:
            holder = "a newer record (instants are claimed in order)"
        else:
            holder = found.record.member_id if found.record else "an unreadable record"
        self._post(
            job,
            m.ClaimAnswered(instant, m.ClaimOutcome.TAKEN, holder=holder, passed=found.passed),
        )

    def _answer_created(self, job: str, instant: datetime, claimed: Claimed) -> None:
        with self._mutex:
            self._claimed[(job, instant)] = claimed
        self.pruner.note(job, claimed.record.scheduled)
        self._post(job, m.ClaimAnswered(instant, m.ClaimOutcome.CREATED, claimed.fencing_token))

    def withdraw(self, job: str, instant: datetime) -> None:
        self._submit(self._withdraw, job, instant)

    def _withdraw(self, job: str, instant: datetime) -> None:
        """Delete our claim's record (contact was lost before its start): the instant is
        then missed, and the core's catch-up decides it."""
        with self._mutex:
            claimed = self._claimed.get((job, instant))
        if claimed is not None:
            try:
                if self._at_least_once(job):
                    deleted = self.redelivery.zk.withdraw(claimed)
                else:
                    deleted = self.claims.withdraw(claimed)
            except Exception as exc:
                log.warning(
                    "could not withdraw the claim of %s (%s); will retry",
                    claimed.record.fire_key,
                    type(exc).__name__,
                )
                self._post(job, m.Withdrawn(instant, done=False))
                return
            if deleted:
                log.info(
                    "withdrew the claim of %s: contact was lost before its start; the "
                    "job's catch-up decides it",
                    claimed.record.fire_key,
                    extra={"event": "withdrawn", "job": job},
                )
        with self._mutex:
            self._claimed.pop((job, instant), None)
            self._records.pop((job, instant), None)
        self._post(job, m.Withdrawn(instant))

    def claimed(self, job: str, instant: datetime) -> Claimed | None:
        with self._mutex:
            return self._claimed.get((job, instant))

    # -- leases --------------------------------------------------------------------------------

    def take_leases(self, takes: list[tuple[str, float, int]], session: int) -> None:
        """The leases the core asked for in one step (job, wait, take). Jobs never fired here get
        their lock and fire folders first, all pipelined in one round trip: a burst of
        first fires then waits for no folder of its own."""
        jobs = [job for job, _, _ in takes]
        if self.leases.folders_known(jobs):
            for job, wait, take in takes:
                self.leases.take(job, wait, take, session)
            return
        self._submit(self._take_leases, takes, session)

    def _take_leases(self, takes: list[tuple[str, float, int]], session: int) -> None:
        jobs = [job for job, _, _ in takes]
        try:
            self.leases.ensure_folders(jobs)
            self.pruner.made_empty(self.claims.ensure_folders(jobs))
        except Exception as exc:  # each take and claim makes its own folder then
            log.debug("folders of %d jobs not made ahead (%s)", len(jobs), type(exc).__name__)
        for job, wait, take in takes:
            self.leases.take(job, wait, take, session)

    # -- results and skip records -------------------------------------------------------------

    def note_attempt(
        self, job: str, instant: datetime, attempt: int, earlier: list[dict[str, Any]]
    ) -> None:
        """Note a failed attempt in our record (it stays `running`: the fire is retried).
        Best effort: the final record lists every attempt again."""
        claimed = self.claimed(job, instant)
        if claimed is not None:
            first = claimed.record.attempt or 1  # > 1: claimed again (at-least-once)
            earlier = [*(claimed.record.attempts or []), *earlier]
            record = claimed.record.with_changes(attempt=attempt + 1, attempts=earlier)
            self._submit(self._note_attempt, claimed, record, claimed.version + attempt - first)

    def _note_attempt(self, claimed: Claimed, record: FireRecord, version: int) -> None:
        try:
            self.claims.note_attempt(claimed, record, version)
        except Exception as exc:
            log.debug("attempt of %s not noted (%s)", record.fire_key, type(exc).__name__)

    def write_result(
        self, action: m.WriteResult, record: FireRecord | None = None, urgent: bool = False
    ) -> None:
        """Complete our record: `record` is the final one (a run's), else a skip's is made.
        `urgent`: the job is no longer ours, its next owner waits for this record: no hold."""
        key = (action.job, action.instant)
        with self._mutex:
            claimed = self._claimed.pop(key, None)
            self._records.pop(key, None)
        if claimed is None:  # nothing of ours to complete
            self._post(action.job, m.ResultWritten(action.instant))
            return
        final = record or claimed.record.with_changes(
            state=action.status,  # "skipped" (with its reason), or "error" (never started)
            skip_reason=action.reason.value if action.reason else None,
            error=action.error,
        )

        def written() -> None:
            self._post(action.job, m.ResultWritten(action.instant))
            spec = self._spec_of(action.job)
            if spec is not None and self.pruner.may_prune(spec):
                self._submit(self.pruner.prune, spec)

        if self._at_least_once(action.job):
            self._submit(self._write_with_marker, claimed, final, written)
            return
        self._results.submit(claimed, final, written, urgent=urgent)

    def _write_with_marker(
        self, claimed: Claimed, record: FireRecord, written: Callable[[], None]
    ) -> None:
        # the job's lease goes back once its result is written: reported then, whenever
        if self.unwritten.write(claimed, record, then=written):
            written()

    def record_skip(self, action: m.RecordSkip, session: int) -> None:
        self.skips.record(action, session)

    def return_trigger(self, job: str) -> None:
        """Leave a trigger again for the job's new owner (it moved before the run)."""
        self._submit(self._return_trigger, job)

    def _return_trigger(self, job: str) -> None:
        try:
            self._triggers.request(job, self._member_id)
        except Exception as exc:
            log.error(
                "a trigger of %s taken here is lost: could not hand it back (%s)",
                job,
                type(exc).__name__,
            )

    # -- history (history_io.py) ------------------------------------------------------------

    def read_history(self, job: str, orphans_since: datetime | None = None) -> None:
        self._submit(self.history.read_history, job, orphans_since)

    def find_orphans(self, job: str, since: datetime) -> None:
        self._submit(self.history.find_orphans, job, since)

    def read_ranges(self, job: str, instants: Iterable[datetime]) -> None:
        self._submit(self.history.read_ranges, job, tuple(instants))

    def has_chores(self) -> bool:
        return bool(self.unwritten.count()) or self.skips.kept() or self.leases.has_chores()

    # -- life ---------------------------------------------------------------------------------

    def idle(self) -> bool:
        return self._results.idle

    def drain(self, timeout: float) -> bool:
        return self._results.drain(timeout)

    def close(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)
        self.leases.close()

    def _submit(self, fn: Callable[..., None], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # shut down: we are stopping
            self._io.submit(self._guard, fn, *args)

    @staticmethod
    def _guard(fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("fire I/O failed unexpectedly")
