"""Writing fire results: one transaction for the results that are ready together.

Each finished run's record must be written once (its final state). Under load hundreds of
runs end within milliseconds of each other; one `setData` each costs a request, a reply and
a wake-up of the run's thread waiting for it. The writer thread takes whatever results are
queued when it wakes and writes them in one transaction (none is held back to wait for
company: a lone result goes at once). A transaction that does not apply (a record deleted
meanwhile, e.g. by `jobs delete`) is redone one result at a time; a write that fails on the
connection is kept (`UnwrittenResults`) and written again by a flush: the engine's chores
while connected, and once as the member stops.

Starts come first: while fires due together are being claimed and started, and for a
moment after (`hold()` says so), results wait, none longer than `MAX_HOLD` seconds after it
was submitted. A burst's results (their writes, the lock releases after them) then no longer
compete with its own later starts, nor with the other members' claims and starts of the
same instant, for the interpreter, the cores and ZooKeeper, and they go in fuller
transactions. Under a hold that never ends (fires due together every second) each result
is written `MAX_HOLD` late, in batches, and none waits longer. A result whose lock another
member is waiting for (the job moved to it) does not wait at all: until it is written that
member finds the lock held and the job's newest record `running`, and skips the instant as
`still-running`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from zksched.core.firerecord import FireRecord
from zksched.runtime.clock import Clock
from zksched.runtime.fire.redelivery import RedeliveryIO
from zksched.runtime.fire.stores import FireStore
from zksched.runtime.fire.tuning import HOLD_STEP, MAX_HOLD, RESULT_BATCH
from zksched.runtime.host import Step, ThreadHost
from zksched.zk.claims import Claimed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Pending:
    claimed: Claimed
    record: FireRecord
    then: Callable[[], None]  # runs once the result is written (or handed to the retries)
    submitted: float  # monotonic
    urgent: bool  # written without waiting for `hold()` (and the results queued before it)


class ResultWriter:
    def __init__(
        self,
        claims: FireStore,
        write_one: Callable[[Claimed, FireRecord], object],
        keep_for_retry: Callable[[Claimed, FireRecord], None],
        hold: Callable[[], bool] = lambda: False,
        clock: Clock | None = None,
        worker: Callable[[str, Step], Callable[[], None]] | None = None,
    ) -> None:
        """`write_one` writes one result on its own and keeps it for a retry if that fails;
        `keep_for_retry` only keeps it (written later, once ZooKeeper answers); `hold()` is
        true while fires are being started (cheap: it is asked every `HOLD_STEP`).
        `worker`: the host's (zksched/runtime/host.py) loop that writes (a thread)."""
        self._claims = claims
        self._write_one = write_one
        self._keep_for_retry = keep_for_retry
        self._hold = hold
        self._clock = clock or Clock()
        self._cv = threading.Condition()
        self._queue: list[_Pending] = []
        self._urgent = 0  # urgent results in the queue
        self._busy = False
        self._wake = (worker or ThreadHost(self._clock).worker)("zksched-results", self.step)

    def submit(
        self,
        claimed: Claimed,
        record: FireRecord,
        then: Callable[[], None],
        urgent: bool = False,
    ) -> None:
        """Write `record`, then call `then`. `urgent`: another member waits for the job's
        lock, given back once this is written (the job moved): no hold."""
        pending = _Pending(claimed, record, then, self._clock.monotonic(), urgent)
        with self._cv:
            self._queue.append(pending)
            self._urgent += urgent
        self._wake()

    @property
    def idle(self) -> bool:
        with self._cv:
            return not self._queue and not self._busy

    def drain(self, timeout: float) -> bool:
        """Wait until everything submitted has been written (graceful stop)."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._queue and not self._busy, timeout)

    def step(self) -> float | None:
        """Write the next batch, unless starts hold it yet (then: how long to wait before
        asking again). None: nothing to write."""
        with self._cv:
            if not self._queue:
                return None
            deadline = self._queue[0].submitted + MAX_HOLD  # the oldest's
        if self._hold() and not self._urgent and self._clock.monotonic() < deadline:
            return HOLD_STEP
        with self._cv:
            batch, self._queue = self._queue[:RESULT_BATCH], self._queue[RESULT_BATCH:]
            self._urgent -= sum(p.urgent for p in batch)
            self._busy = True
        try:
            self._write(batch)
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()
        return 0.0

    def _write(self, batch: list[_Pending]) -> None:
        outcome: bool | None = False  # None: unknown (the connection failed)
        if len(batch) > 1:
            try:
                outcome = self._claims.complete_many([(p.claimed, p.record) for p in batch])
            except Exception as exc:
                log.warning(
                    "could not record %d results (%s); will retry", len(batch), type(exc).__name__
                )
                outcome = None
        for pending in batch:
            if outcome is None:  # written (unconditionally, so harmlessly) once it answers
                self._keep_for_retry(pending.claimed, pending.record)
            elif not outcome:
                try:
                    self._write_one(pending.claimed, pending.record)
                except Exception:  # write_one keeps what it cannot write; never stop here
                    log.exception("writing the result of %s failed", pending.record.fire_key)
        for pending in batch:
            try:
                pending.then()
            except Exception:
                log.exception("reporting %s failed", pending.record.fire_key)


Then = Callable[[], None] | None


class UnwrittenResults:
    def __init__(
        self,
        claims: FireStore,
        redelivery: RedeliveryIO,
        at_least_once: Callable[[str], bool],
        retry_skips: Callable[[], None],
    ) -> None:
        self._claims = claims
        self._redelivery = redelivery
        self._at_least_once = at_least_once
        self._retry_skips = retry_skips
        self._mutex = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time
        self._kept: list[tuple[Claimed, FireRecord, Then]] = []

    def write(self, claimed: Claimed, record: FireRecord, then: Then = None) -> bool:
        """Write one result; False: kept (with `then`) and written again by a flush."""
        try:
            if self._at_least_once(record.job):
                self._redelivery.complete(claimed, record)  # with its live marker's delete
            elif not self._claims.complete(claimed, record):
                log.warning(
                    "the record of %s is gone (its job deleted?); its result (%s) is not written",
                    record.fire_key,
                    record.state,
                    extra={"job": record.job, "event": "result-dropped"},
                )
        except Exception as exc:
            log.warning(
                "could not record the result of %s (%s); will retry",
                record.fire_key,
                type(exc).__name__,
            )
            self.keep(claimed, record, then)
            return False
        return True

    def keep(self, claimed: Claimed, record: FireRecord, then: Then = None) -> None:
        with self._mutex:
            self._kept.append((claimed, record, then))

    def flush(self, deadline: float | None = None) -> int:
        """Write the kept results again, then the kept skip records. One flush at a time:
        another returns at once (or waits for it until `deadline`, monotonic, which also
        ends the writing: the rest stays kept, first in line). How many are left."""
        wait = 0.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._flushing.acquire(timeout=wait):
            return self.count()
        try:
            with self._mutex:
                pending, self._kept = self._kept, []
            done = 0
            try:
                for claimed, record, then in pending:
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    done += 1
                    if self.write(claimed, record, then) and then is not None:
                        then()
            finally:  # what was not tried goes back
                with self._mutex:
                    self._kept[:0] = pending[done:]
            self._retry_skips()
        finally:
            self._flushing.release()
        return self.count()

    def count(self) -> int:
        with self._mutex:
            return len(self._kept)
