"""The fire thread's own owner table (`OwnerChain`): derived from the last one on every
cluster view, so that only the jobs a membership change moved are looked at again; weighed
in full before this member joins; and the command allow-list refusals it implies.

Runs on the fire engine's thread only (runtime/fire/engine.py): no locks.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping

from zksched.core.allowlist import command_refusal
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.core.owners import OwnerTable
from zksched.runtime.membership.view import ClusterView
from zksched.runtime.skips import SkipLog

log = logging.getLogger("zksched.fire")

Step = Callable[[float], list[m.Action]]  # run on the engine's thread at a time `now`


class OwnerChain:
    def __init__(
        self,
        skips: SkipLog,
        allowed_commands: tuple[str, ...] | None,
        post: Callable[[Step], None],
        weigh_slice: int,
    ) -> None:
        """`post` queues a step on the engine's thread: a slice of `weigh_slice` jobs of the
        weighing before joining."""
        self.table = OwnerTable()
        self._slice = weigh_slice
        self._skips = skips
        self._allowed = allowed_commands
        self._post = post
        self._refused: set[tuple[str, str]] = set()
        self._weighing = False
        # the job table whose every job the table's memo holds (weighed before joining, and
        # carried by every table derived since): joining then moves what the memo says
        self._weighed: Mapping[str, JobSpec] | None = None
        self._whole = False  # no table built afresh since the weighing began

    def follow(
        self, view: ClusterView, last: ClusterView | None, jobs: Mapping[str, JobSpec]
    ) -> frozenset[str] | None:
        """Derive the table for `view` from the last one; the jobs this member gained or
        lost (None: any may have, e.g. it left the view it had: `last`).
        `jobs`: the job table the engine aligns."""
        members = view.table.members
        if view.joining is not None:  # weighed as if joined: joining then moves little
            members = (*members, view.joining)
        previous = self.table
        table = self.table = previous.with_members(members, focus=view.member_id)
        if table is previous:
            moved: frozenset[str] | None = frozenset()
        elif table.derived_from == previous.generation:
            moved = table.moved
        else:
            moved = None
            self._whole, self._weighed = False, None
        if last is None or last.active != view.active:
            moved = None
            if self._joined(view, last, jobs):
                # it owned nothing while it waited: now the jobs the memo gives it, and
                # every job of the table is in the memo (weighed before joining)
                moved = table.weighed_for(view.member_id)
        return moved

    def _joined(
        self, view: ClusterView, last: ClusterView | None, jobs: Mapping[str, JobSpec]
    ) -> bool:
        return (
            last is not None
            and view.active
            and not last.active
            and last.session_id == view.session_id
            and self._weighed is jobs
            # an allow-list's refusals are jobs it would own by labels: found by a look at
            # every job, as a join without this shortcut does
            and self._allowed is None
        )

    def weigh_before_joining(
        self, view: ClusterView | None, jobs: Mapping[str, JobSpec], ready: Callable[[], None]
    ) -> None:
        """While this member waits to join (`view.joining`), weigh every job's owner over
        the members and itself, a slice per step (the thread's other steps and heartbeat go
        on), then call `ready`, once. Its node appears only then: the others hand it its
        share when it can act at once, and the join itself costs one weight per job."""
        if self._weighing or view is None or view.joining is None:
            return
        self._weighing, self._whole = True, True
        # an iterator, not a list of a million pairs: the table's entries never change (a
        # new table is a new snapshot)
        items, count = iter(jobs.items()), len(jobs)

        def step(_now: float) -> list[m.Action]:
            table = self.table  # the newest: a change meanwhile keeps what is weighed
            weighed = 0
            for name, spec in itertools.islice(items, self._slice):
                table.job_owner(name, spec)
                weighed += 1
            if weighed == self._slice:
                self._post(step)
            else:
                self._weighed = jobs if self._whole else None
                log.info(
                    "weighed the owners of %d jobs; joining the cluster",
                    count,
                    extra={"event": "ready-to-join", "jobs": count},
                )
                ready()
            return []

        self._post(step)

    def note_refused(
        self, view: ClusterView, jobs: Mapping[str, JobSpec], moved: frozenset[str] | None
    ) -> None:
        """Report once per job and command a job ours by labels that our command allow-list
        refuses (the owner table gave it to the next eligible member). `moved`: only these
        jobs can have changed hands since the last look (None: any)."""
        if self._allowed is None or not view.active:
            return
        table, me = self.table, view.member_id
        names = jobs.keys() if moved is None else moved & jobs.keys()
        for name in names:
            spec = jobs[name]
            if spec.kind == "function":
                continue  # a daemon never runs those (an allow-list has nothing to say)
            program = spec.command[0]
            if (name, program) in self._refused:
                continue
            runner = table.job_owner(name, spec)
            if runner != me and table.owner(name, spec.labels) == me:
                self._refused.add((name, program))
                why = command_refusal(self._allowed, program, spec.env)
                self._skips.skip(
                    name,
                    "command-not-allowed",
                    f"{why or 'refused'}; "
                    + (f"{runner} runs it" if runner else "no member allows it: it does not run"),
                )
