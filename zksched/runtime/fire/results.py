"""Writing fire results: one transaction for the results that are ready together.

Each finished run's record must be written once (its final state). Under load hundreds of
runs end within milliseconds of each other; one `setData` each costs a request, a reply and
a wake-up of the run's thread waiting for it. The writer thread takes whatever results are
queued when it wakes and writes them in one transaction (none is held back to wait for
company: a lone result goes at once). A transaction that does not apply (a record deleted
meanwhile, e.g. by `jobs delete`) is redone one result at a time; a write that fails on the
connection is handed to the fire path's retry list.

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
from collections.abc import Callable
from dataclasses import dataclass

from zksched.core.firerecord import FireRecord
from zksched.runtime.clock import Clock
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
