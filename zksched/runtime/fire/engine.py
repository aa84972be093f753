"""The fire engine: the thread that runs this member's fire core and carries out its actions.

    job table, cluster view, session loss, triggers ─┐
    answers from ZooKeeper (zk_actions.py) ──────────┼─> queue -> core (zksched/core/fire)
    command starts and exits (run_actions.py) ───────┘                 │
   timers <── SetTimer, next_wake Claim, TakeLease, ... ──> ZkActions     │
                                  Start, Terminate ──────> RunActions (a Runner)
                                  RecordAttempt ─────────> AttemptLog, ZkActions
                                  Skip, Warn ────────────> SkipLog, log

One thread (`zksched-core`) owns the core: every input is a closure posted to its queue, run
in order, and what it returns is dispatched at once. Nothing here decides what a fire does;
it only does what the core says and tells it what happened. Its world comes in from outside:
ZooKeeper as `FireStores` (stores.py), commands as a `Runner`, threads, queue and clock as a
`Host` (runtime/host.py); the cluster simulator gives its own and calls `turn()` itself.
"""

from __future__ import annotations

import functools
import heapq
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from zksched.core.fire import model as m
from zksched.core.fire.member import MemberFireCore, owns_nothing
from zksched.core.firekey import fire_key
from zksched.core.jobspec import JobSpec
from zksched.core.jobtable import FireTable
from zksched.runtime.fire import tuning
from zksched.runtime.fire.run_actions import CoreCall, FireSettings, RunActions
from zksched.runtime.fire.stores import FireStores
from zksched.runtime.fire.zk_actions import ZkActions
from zksched.runtime.host import Host, Inbox
from zksched.runtime.membership import (
    ClusterView,
    Deriving,
    JobsSnapshot,
    OwnerChain,
    Trigger,
    TriggerIntake,
)
from zksched.runtime.run import AttemptLog, FunctionRunner, Runner, after_claim
from zksched.runtime.skips import SkipLog

log = logging.getLogger("zksched.fire")


@dataclass
class _Sends:
    """What one turn of the engine's loop sends together: claims in transactions, lease
    takes with their lock folders made first (zk_actions.py)."""

    claims: list[m.Claim] = field(default_factory=list)
    takes: list[tuple[str, float, int]] = field(default_factory=list)


class FireEngine:
    def __init__(
        self,
        stores: FireStores,
        runner: Runner,
        skips: SkipLog,
        settings: FireSettings,
        host: Host,
        functions: FunctionRunner | None = None,
        core: MemberFireCore | None = None,
        align_slice: int = tuning.ALIGN_SLICE,
        derive_slice: int = tuning.DERIVE_SLICE,
    ) -> None:
        """`core`: the fire core to run (a fresh one by default); `align_slice`: jobs the
        core aligns a turn after a change of table or view, `derive_slice`: entries of a
        change's owner table derived a turn."""
        self.align_slice = align_slice
        self._align_posted = False
        self._runner = runner
        self._skips = skips
        self._settings = settings
        self._clock = host.clock
        self.core = core or MemberFireCore(m.FireTunables(on_session_loss=settings.on_session_loss))
        self.io = ZkActions(
            stores,
            settings.member_id,
            host,
            self._post_event,
            lambda job: self._table.get(job),
            hold_results=lambda: self.commands.starting(),
        )
        self._queue: Inbox[CoreCall | None] = host.inbox()
        self._heap: list[tuple[float, str]] = []
        self._timer_at: dict[str, float] = {}
        self.commands = RunActions(
            runner,
            settings,
            lambda job: self._table.get(job),
            self._post,
            self.core.handle,
            functions,
            host,
        )
        self.attempts = AttemptLog()  # retried fires' earlier attempts
        self._table: Mapping[str, JobSpec] = {}
        self._owned: frozenset[str] = frozenset()
        self._owned_dirty = False
        self._view: ClusterView | None = None
        self.owners = OwnerChain(
            skips, settings.allowed_commands, self._post, tuning.WEIGH_SLICE, derive_slice
        )
        self._jobs_known = False  # a job table came (update_jobs)
        # Called once (this thread) when every job is weighed while this member waits to
        # join (its view carries `joining`): the membership may create its node then.
        self.on_ready_to_join: Callable[[], None] | None = None
        self._background = host.pool("zksched-background", 2)
        self._intake = TriggerIntake(
            stores.triggers.take,
            lambda t: self._post_event(t.job, m.Triggered(t.znode)),
            self._background.submit,
        )
        self._thread: threading.Thread | None = None
        self._next_chores = 0.0
        self.heartbeat = 0.0
        self.stats = self.commands.stats
        self.observers = self.commands.observers
        self.catchup_observers: list[Callable[[str, int], None]] = []

    # -- inputs (any thread: post and return) ---------------------------------------------------

    def _post(self, step: CoreCall) -> None:
        self._queue.put(step)

    def _post_event(self, job: str, event: m.JobEvent) -> None:
        self._queue.put(lambda now: self.core.handle(job, event, now))

    def update_jobs(self, snapshot: JobsSnapshot) -> None:
        # views of the snapshot's entries, not copies: a million jobs
        table = FireTable(snapshot.entries)

        def step(now: float) -> list[m.Action]:
            self._table = table.specs
            self._jobs_known = True
            if self._view is not None:
                self.owners.note_refused(self._view, self._table, None)
            self._weigh_before_joining()
            return self._aligned(self.core.table_changed(table, now, self.align_slice))

        self._post_change(step)

    def update_view(self, view: ClusterView) -> None:
        session = view.session_id if view.connected else None

        def step(now: float) -> list[m.Action]:
            moved = self.owners.follow(view, self._view, self._table, self.update_view)
            if isinstance(moved, Deriving):
                return []  # its step comes again when its table is: it changes what we own
            self._owned_dirty = True
            table, me = self.owners.table, view.member_id

            def owns(name: str, spec: JobSpec) -> bool:
                return table.job_owner(name, spec) == me

            self._view = view if session is not None else None
            if self._view is not None:
                self.owners.note_refused(view, self._table, moved)
            self._weigh_before_joining()
            mine = owns if view.active else owns_nothing  # not in the view: the core's own
            return self._aligned(
                self.core.view_changed(session, mine, now, moved, self.align_slice)
            )

        self._post(step)

    def _aligned(self, actions: list[m.Action]) -> list[m.Action]:
        """The core aligns its jobs a slice a turn: the rest waits behind what is queued."""
        if self.core.aligning and not self._align_posted:
            self._align_posted = True

            def step(now: float) -> list[m.Action]:
                self._align_posted = False
                return self._aligned(self.core.align(now, self.align_slice))

            self._post(step)
        return actions

    def _weigh_before_joining(self) -> None:
        if self.on_ready_to_join is not None and self._jobs_known:
            ready, aligning = self.on_ready_to_join, lambda: self.core.aligning
            self.owners.weigh_before_joining(self._view, self._table, ready, aligning)

    def session_lost(self) -> None:
        """The session may be lost (the membership's verdict): never reuse its locks, and
        the core stops what it must."""
        self.io.leases.session_lost()
        self._post_change(self.core.session_lost)

    def _post_change(self, change: CoreCall) -> None:
        """Queue a step that may change what this member owns."""

        def step(now: float) -> list[m.Action]:
            self._owned_dirty = True
            return change(now)

        self._post(step)

    def triggers(self, pending: list[Trigger]) -> None:
        """Take each pending trigger of a job this member owns (deleting its node: one member
        does) and run it once. Looked at again whenever what this member owns changes."""
        self._intake.offer(pending, self._owned)

    # -- queries (any thread) ---------------------------------------------------------------

    def owned_jobs(self) -> list[str]:
        return sorted(self._owned)

    def next_due(self) -> float | None:
        """The earliest timer: a machine's, or the one for every dormant job."""
        wake, heap = self.core.next_wake, self._heap
        return wake if not heap else heap[0][0] if wake is None else min(heap[0][0], wake)

    def running_jobs(self) -> list[str]:
        return sorted({job for job, _ in list(self.commands.runs)})

    def busy(self) -> bool:
        return bool(self.commands.runs) or self.core.busy() or not self.io.idle()

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="zksched-core", daemon=True)
        self._thread.start()

    def stop_dispatching(self) -> None:
        """A graceful stop: own nothing now (idle leases go back at once, busy ones when done)."""
        self._post_change(self.core.stop)

    def stop(self, wait_for_running: float = 30.0) -> None:
        """Let what is in flight finish (up to `wait_for_running` seconds), then terminate
        what still runs, write what is left, and end the engine's thread."""
        deadline = time.monotonic() + wait_for_running
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.commands.runs:
            log.warning("fires still running after %.0fs; terminating them", wait_for_running)
            self.commands.terminate_all("the daemon is stopping")
            end = time.monotonic() + 10.0
            while self.commands.runs and time.monotonic() < end:
                time.sleep(0.05)
        self.commands.terminating = True
        self.io.drain(5.0)
        unwritten = self.io.unwritten.flush(deadline=time.monotonic() + 5.0)
        if unwritten:  # as a crashed member leaves them
            log.warning("stopping with %d results not written: they stay `running`", unwritten)
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(5.0)
        self._background.shutdown(wait=False, cancel_futures=True)
        self.commands.close()
        self.io.close()

    # -- the engine's thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            due, now = self.next_due(), self._clock.now()
            wait = 1.0 if due is None else min(1.0, max(0.0, due - now))
            if not self.turn(wait):
                return

    def turn(self, wait: float = 0.0) -> bool:
        """One turn: take the queued inputs (waiting up to `wait` seconds for the first),
        fire the timers due, dispatch what the core returns, send the claims and lease
        takes together. False: the engine is stopping. The engine's thread runs turns in a
        loop; the simulator runs them at simulated times."""
        steps: list[CoreCall] = []
        try:
            first = self._queue.get(timeout=wait)
            if first is None:
                return False
            steps.append(first)
        except queue.Empty:
            pass
        while len(steps) < tuning.STEPS_PER_TURN:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                return False
            steps.append(more)
        now = self._clock.now()
        self.heartbeat = now
        # each step's actions go out at once (a start must not wait for the rest of
        # the turn); claims and lease takes are gathered and sent together at its end
        sends = _Sends()
        for step in steps:
            self._step(step, now, sends)
        while self._heap and self._heap[0][0] <= now:
            at, job = heapq.heappop(self._heap)
            if self._timer_at.get(job) == at:
                del self._timer_at[job]
                self._step(functools.partial(self.core.handle, job, m.Tick()), now, sends)
        wake = self.core.next_wake
        if wake is not None and wake <= now:
            self._step(self.core.wake_due, now, sends)
        self._send(sends)
        if self._owned_dirty and not self.core.aligning:  # said once the change is done
            self._owned_dirty = False
            self._note_owned()
        if now >= self._next_chores:
            self._next_chores = now + tuning.CHORES_INTERVAL
            if self.core.session is not None and self.io.has_chores():
                # off this thread: each write that cannot get through waits its timeout
                self._background.submit(self.io.unwritten.flush)
                self._background.submit(self.io.leases.tidy)
        return True

    def _step(self, step: CoreCall, now: float, sends: _Sends) -> None:
        try:
            self._dispatch(step(now), now, sends)
        except Exception:  # a bug; the job's machine says what it was
            log.exception("the fire core failed on an event")

    def _note_owned(self) -> None:
        owned = self.core.owned_set()
        if owned == self._owned:
            return
        taken = len(owned - self._owned)
        dropped = len(self._owned) - (len(owned) - taken)  # what was owned and is not
        self._owned = owned
        said = {"owned": len(owned), "taken": taken, "dropped": dropped}
        text = "now owning %(owned)d jobs (%(taken)d taken over, %(dropped)d dropped)"
        log.info(text, said, extra={"event": "owned", **said})
        self.triggers(self._intake.pending)

    def _send(self, sends: _Sends) -> None:
        session = self.core.session or 0
        if sends.takes:
            self.io.take_leases(sends.takes, session)
        if sends.claims:
            self.io.claim(sends.claims, session)

    def _dispatch(self, actions: list[m.Action], now: float, sends: _Sends) -> None:
        session = self.core.session or 0
        for action in actions:
            match action:
                case m.SetTimer(job, at):
                    self._timer_at[job] = at
                    heapq.heappush(self._heap, (at, job))
                case m.ReadHistory(job, orphans_since):
                    self.io.read_history(job, orphans_since)
                case m.FindOrphans(job, since):
                    self.io.find_orphans(job, since)
                case m.ReadRanges(job, instants):
                    self.io.read_ranges(job, instants)
                case m.TakeLease(job, wait, take):
                    sends.takes.append((job, wait, take))
                case m.GiveBackLease(job, take):
                    self.io.leases.give_back(job, take)
                case m.Claim():
                    sends.claims.append(action)
                    if action.kind == "catchup":
                        for observer in self.catchup_observers:
                            observer(action.job, 1)
                case m.Resolve(job, instant):
                    self.io.resolve(job, instant)
                case m.Withdraw(job, instant):
                    self.io.withdraw(job, instant)
                case m.Start():
                    self.commands.start(action, now)
                case m.Terminate(job, instant, why):
                    self.commands.terminate_fire(job, instant, why)
                case m.RecordAttempt(job, instant, attempt, status, retry_at):
                    result = self.commands.finals.pop((job, instant), None)
                    earlier = self.attempts.failed(
                        (job, instant), attempt, result, status, retry_at
                    )
                    self.io.note_attempt(job, instant, attempt, earlier)
                    text = "%s: attempt %d %s; attempt %d in %.1fs"
                    said = (fire_key(job, instant), attempt, status, attempt + 1, retry_at - now)
                    log.info(text, *said, extra={"event": "retry", "job": job})
                case m.WriteResult(job, instant, status, _reason, error):
                    result = self.commands.finals.pop((job, instant), None)
                    fields = self.attempts.final((job, instant), result, status, error)
                    claimed = self.io.claimed(job, instant)
                    final = None
                    if fields and claimed:
                        final = claimed.record.with_changes(**after_claim(fields, claimed.record))
                    machine = self.core.jobs.get(job)
                    self.io.write_result(action, final, machine is None or not machine.owned)
                case m.RecordSkip():
                    self.io.record_skip(action, session)
                case m.Skip(job, instant, reason, detail, count):
                    key = fire_key(job, instant)
                    self._skips.skip(job, reason.value, f"{key} {detail}".strip(), count=count)
                case m.ReturnTrigger(job):
                    self.io.return_trigger(job)
                case m.Warn(job, event, text):
                    log.warning("%s: %s", job, text, extra={"event": event, "job": job})
