"""History pruning: each job keeps `history` fire records, and every record of the last
minute.

No record younger than PRUNE_MIN_AGE (plus the job's jitter) on the pruner's clock is ever
deleted: with `history = 1` a record could otherwise go the moment a newer one exists, and a
member whose clock is a few seconds behind would claim that instant afresh, on time by its
clock, and run it again. Pruning raises the job's horizon before it deletes anything
(`FireClaims.prune`), so no catch-up takes a pruned instant for one that never ran. Pruning
goes in batches (PRUNE_SLACK records at a time): one transaction per few fires. A job whose
records this member has not listed yet is listed once it has written more than it keeps
(not at its first result: a burst of first fires would list every folder).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from zksched.core.firekey import format_utc
from zksched.core.jobspec import JobSpec
from zksched.core.pruning import PRUNE_MIN_AGE, PRUNE_SLACK, prune_victims
from zksched.runtime.clock import Clock
from zksched.runtime.fire.stores import FireStore

log = logging.getLogger(__name__)


class HistoryPruner:
    def __init__(
        self,
        claims: FireStore,
        clock: Clock,
        known_final: Callable[[str, str], bool] = lambda _job, _instant: True,
    ) -> None:
        """`known_final(job, instant)`: the record is known not to be `running` (an
        at-least-once job's orphan inside its catch-up window is never pruned)."""
        self._claims = claims
        self._clock = clock
        self._known_final = known_final
        self._mutex = threading.Lock()
        self._known: dict[str, list[str]] = {}  # job -> record instants known, oldest first
        self._unlisted: dict[str, int] = {}  # job not listed yet -> records noted since

    def remember(self, job: str, instants: list[str]) -> None:
        with self._mutex:
            self._known[job] = sorted(instants)
            self._unlisted.pop(job, None)

    def made_empty(self, jobs: list[str]) -> None:
        """These jobs' fire folders were just created here: they hold no record yet."""
        with self._mutex:
            for job in jobs:
                self._known.setdefault(job, [])
                self._unlisted.pop(job, None)

    def note(self, job: str, instant: str) -> None:
        with self._mutex:
            known = self._known.get(job)
            if known is None:
                self._unlisted[job] = self._unlisted.get(job, 0) + 1
                return
            if instant in known:
                return
            known.append(instant)
            if len(known) > 1 and known[-2] > instant:
                known.sort()

    def forget(self, job: str) -> None:
        with self._mutex:
            self._known.pop(job, None)
            self._unlisted.pop(job, None)

    def may_prune(self, spec: JobSpec) -> bool:
        """Whether `prune(spec)` could delete anything (cheap: asked after every result)."""
        keep = max(1, spec.history) + PRUNE_SLACK
        with self._mutex:
            known = self._known.get(spec.name)
            if known is None:
                return self._unlisted.get(spec.name, 0) > keep
            return len(known) > keep

    def prune(self, spec: JobSpec) -> None:
        """Keep `history` records and the young ones (called after a result is written)."""
        with self._mutex:
            known = list(self._known[spec.name]) if spec.name in self._known else None
        try:
            if known is None:
                known = self._claims.instants(spec.name)
                self.remember(spec.name, known)
            # an instant is fired up to its jitter after it: its neighbours' records stay
            age = PRUNE_MIN_AGE + spec.jitter
            victims = prune_victims(known, max(1, spec.history), self._clock.now(), age)
            if spec.delivery == "at-least-once":
                window = self._clock.now() - spec.catchup_window
                since = format_utc(datetime.fromtimestamp(window, UTC))
                victims = [i for i in victims if i < since or self._known_final(spec.name, i)]
            if len(victims) <= PRUNE_SLACK:
                return
            if not self._claims.prune(spec.name, victims):
                return  # another member pruned meanwhile: they stay known, for next time
            gone = set(victims)
            with self._mutex:
                current = self._known.get(spec.name, [])
                self._known[spec.name] = [i for i in current if i not in gone]
        except (KazooException, KazooTimeoutError) as exc:
            log.debug("history pruning of %s postponed: %s", spec.name, exc)
