"""Taking the pending triggers (`jobs trigger NAME`) of the jobs this member owns: each node
is deleted by exactly one member, which then runs the job once (zk/triggers.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from zksched.runtime.membership.job_watch import Trigger


class TriggerIntake:
    def __init__(
        self,
        take_node: Callable[[str], bool] | None,
        triggered: Callable[[Trigger], None],
        submit: Callable[..., object],
    ) -> None:
        self._take_node = take_node  # True when this call deleted the node (None: tests)
        self._triggered = triggered
        self._submit = submit  # a small pool's: deletes are ZooKeeper round trips
        self._in_flight: set[str] = set()
        self.pending: list[Trigger] = []

    def offer(self, pending: list[Trigger], owned: frozenset[str]) -> None:
        """Take each of `pending` whose job is owned here; kept to be offered again when
        what this member owns changes."""
        self.pending = pending
        by_job: dict[str, list[Trigger]] = {}
        for trigger in pending:
            if trigger.job in owned and trigger.znode not in self._in_flight:
                by_job.setdefault(trigger.job, []).append(trigger)
        # one job's at a time, round robin: a flood of one job's triggers delays no other's
        rounds = itertools.zip_longest(*by_job.values())
        for trigger in (t for taken in rounds for t in taken if t is not None):
            self._in_flight.add(trigger.znode)
            try:
                self._submit(self._take, trigger)
            except RuntimeError:  # stopping
                return

    def _take(self, trigger: Trigger) -> None:
        try:
            if self._take_node is None or self._take_node(trigger.znode):
                self._triggered(trigger)
        finally:
            self._in_flight.discard(trigger.znode)
