"""The fire thread's own owner table (`OwnerChain`): derived from the last one on every
cluster view, so that only the jobs a membership change moved are looked at again, a slice
per step (at a million jobs a derivation is a second or two of weighing: the thread's timers
and fires go on meanwhile); weighed in full before this member joins; and the command
allow-list refusals it implies.

Runs on the fire engine's thread only (runtime/fire/engine.py): no locks.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from zksched.core.allowlist import command_refusal
from zksched.core.fire import model as m
from zksched.core.jobspec import JobSpec
from zksched.core.owners import OwnerTable, TableDerivation
from zksched.runtime.membership.view import ClusterView
from zksched.runtime.skips import SkipLog

log = logging.getLogger("zksched.fire")

Step = Callable[[float], list[m.Action]]  # run on the engine's thread at a time `now`
Again = Callable[[ClusterView], None]  # posts the step of a view (anew)


class Deriving:
    """`follow`'s answer while the view's table is being derived: the view's step comes
    again once it is (nothing changes meanwhile: the last table and view hold)."""


DERIVING = Deriving()


@dataclass
class _Derivation:
    view: ClusterView
    work: TableDerivation  # done: waiting for the view's step to take its table
    again: Again


class OwnerChain:
    def __init__(
        self,
        skips: SkipLog,
        allowed_commands: tuple[str, ...] | None,
        post: Callable[[Step], None],
        weigh_slice: int,
        derive_slice: int | None = None,
    ) -> None:
        """`post` queues a step on the engine's thread: a slice of `weigh_slice` jobs of the
        weighing before joining, or of `derive_slice` entries of a derivation (None: derived
        in the view's own step)."""
        self.table = OwnerTable()
        self._slice = weigh_slice
        self._derive_slice = derive_slice
        self._deriving: _Derivation | None = None
        self._after: tuple[ClusterView, Again] | None = None  # the newest view meanwhile
        self._skips = skips
        self._allowed = allowed_commands
        self._post = post
        self._refused: set[tuple[str, str]] = set()
        self._weighing = False
        # the job table whose every job the table's memo holds (weighed before joining, and
        # carried by every table derived since): joining then moves what the memo says
        self._weighed: Mapping[str, JobSpec] | None = None
        self._whole = False  # no table built afresh since the weighing began

    @property
    def deriving(self) -> bool:
        """A view's table is being derived (its step waits for it)."""
        return self._deriving is not None

    def follow(
        self,
        view: ClusterView,
        last: ClusterView | None,
        jobs: Mapping[str, JobSpec],
        again: Again | None = None,
    ) -> frozenset[str] | Deriving | None:
        """Derive the table for `view` from the last one; the jobs this member gained or
        lost (None: any may have, e.g. it left the view it had: `last`).
        `jobs`: the job table the engine aligns. With `again`, a derivation longer than a
        slice goes on in steps of its own and `DERIVING` is the answer: `again(view)` once
        it is done (a view that comes meanwhile waits for it, and only the newest)."""
        running = self._deriving
        if running is not None and (running.view is not view or not running.work.done):
            if again is None:  # it would wait with nothing to bring it back
                raise RuntimeError("a view to follow at once while a derivation is under way")
            self._after = (view, again)
            return DERIVING
        if running is not None:  # its view's step, again: the derived table is taken now
            work, self._deriving = running.work, None
        else:
            members = view.table.members
            if view.joining is not None:  # weighed as if joined: joining then moves little
                members = (*members, view.joining)
            work = TableDerivation(self.table, members, view.member_id, self._derive_slice)
            if again is not None and work.advance() is None:
                self._deriving = _Derivation(view, work, again)
                self._post(self._derive)
                return DERIVING
        # asked once more: what the last table weighed since the derivation was done counts
        table = work.finish()
        previous, self.table = self.table, table
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
        if self._after is not None:  # the newest view that came meanwhile: its turn
            (newest, its_again), self._after = self._after, None
            its_again(newest)
        return moved

    def _derive(self, _now: float) -> list[m.Action]:
        """A slice of the derivation under way; its view's step again once it is done."""
        running = self._deriving
        if running is not None and not running.work.done:
            if running.work.advance() is None:
                self._post(self._derive)
            else:
                running.again(running.view)
        return []

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
        self,
        view: ClusterView | None,
        jobs: Mapping[str, JobSpec],
        ready: Callable[[], None],
        aligning: Callable[[], bool] = lambda: False,
    ) -> None:
        """While this member waits to join (`view.joining`), weigh every job's owner over
        the members and itself, a slice per step (the thread's other steps and heartbeat go
        on), then call `ready`, once, when `aligning()` is False as well. Its node appears
        only then: the others hand it its share when it can act at once, and the join itself
        costs one weight per job. (Joined while the fire core still aligns, the share would
        wait behind the rest of that alignment. A core told `owns_nothing` has only what it
        holds to align, nothing before a first join: this holds the rule whatever it holds.)
        Each call lets go of a weighed table that `jobs` replaced (it holds every job)."""
        if self._weighed is not None and self._weighed is not jobs:
            self._weighed = None  # a table replaced since: let go (a million jobs' dict)
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
                self._post(join)
            return []

        def join(_now: float) -> list[m.Action]:
            if aligning():
                self._post(join)  # looked at again next turn, behind the alignment's slice
                return []
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
