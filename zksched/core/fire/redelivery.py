"""At-least-once delivery (`delivery = "at-least-once"`): what a job's machine does with
orphaned claims, records left `running` by a member whose session ended before their
result (the shell tells them by their missing live marker: zk/redelivery.py).

The job's owner runs an orphan again as the next attempt of the same fire (same fire key,
a new claim and a larger fencing token), like a catch-up instant: in instant order with
the rest, under the job's lease for overlap = skip, within the catch-up window. It looks
for orphans when it plans the job (taking it over: the usual case, the dead member owned
it) and every `orphan_interval` while the job is active here (a member that had handed the
job over may die with a run of it going).

Invariants:
- Never an instant of this machine's own fires (its result is ours to write).
- Never for an at-most-once job: there a crash between claim and start loses the instant.
"""

from __future__ import annotations

import bisect
from datetime import datetime

from zksched.core.fire import model as m
from zksched.core.fire.stages import JobPhase
from zksched.core.fire.state import NEVER, JobState, _utc


class Redelivering(JobState):
    __slots__ = ()

    @property
    def _at_least_once(self) -> bool:
        return self.spec.delivery == "at-least-once"

    def _queue_reruns(
        self, orphans: tuple[tuple[datetime, int], ...], limit: datetime
    ) -> list[datetime]:
        """Note the orphans to run again, as their next attempt; returns those noted (the
        caller queues or plans them). One in hand or already queued keeps its place."""
        queued = {instant for instant, _ in self._queue}
        noted = []
        for instant, attempt in orphans:
            if instant not in self.fires and instant not in queued and instant <= limit:
                self._reruns_dict()[instant] = attempt + 1
                noted.append(instant)
        return noted

    def _look_for_orphans(self, now: float) -> None:
        """While active: ask for the job's orphans when it is time (one ask at a time)."""
        if self._at_least_once and self.phase is JobPhase.ACTIVE and self._orphans_due <= now:
            self._orphans_due = now + self.tunables.answer_deadline  # (answered: sooner)
            since = _utc(now - self.spec.catchup_window)
            self._emit(m.FindOrphans(self.spec.name, since))

    def _orphans_found(self, event: m.OrphansFound, now: float) -> None:
        if not (self._at_least_once and self.phase is JobPhase.ACTIVE):
            return  # an answer for an activation given up; the next planning looks again
        self._orphans_due = now + (
            self.tunables.orphan_interval if event.ok else self.tunables.retry_interval
        )
        for instant in sorted(self._queue_reruns(event.orphans, _utc(now))):
            # in instant order with the catch-up's: its place in the queue
            at = bisect.bisect([i for i, _ in self._queue], instant)
            self._queue_list().insert(at, (instant, "catchup"))
        self._pump(now)

    def _orphan_checks_from(self, now: float) -> None:
        """The job became active here: the next look after the planning's."""
        self._orphans_due = now + self.tunables.orphan_interval if self._at_least_once else NEVER
