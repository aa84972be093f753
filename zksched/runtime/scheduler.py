"""The fire timer: one heap of next instants for the jobs this member owns.

Ownership is reconciled whenever the job table or the cluster view changes: jobs this member
takes over are caught up (their missed instants, by policy) and scheduled; jobs it lost are
dropped (stale heap entries are skipped by generation). All fires run on one bounded worker
pool (`concurrency`), never a thread per fire; a scheduled fire holds a pool thread only
until its command has started (the run's own monitor thread records the result).

For `overlap = "skip"` jobs the timer also wakes `leases.LEAD` seconds before a fire to take
the job's lock, unless this member holds it already (leases.py): the fire itself then only
claims.

While a job's catch-up runs, its scheduled instants that come due wait behind it, so that a
backlog is run oldest first and never collides with the job's own next instant.

Instants leave the heap `STAGE_AHEAD` (0.25 s) before they are due and wait in a stage, by
due time: their next instants are pushed then, and the claims of the fires due together are
drafted on the fire pool meanwhile (`FirePath.draft`); when due, the staged instants that
still hold (same generation, not behind a catch-up) are handed on with their drafts, if
ready. Nothing is handed on before it is due; lock-ahead entries leave the heap up to
`LEAD` + `STAGE_AHEAD` seconds before the fire.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from zksched.core.catchup import (
    holes,
    newest_scheduled,
    next_records,
    outside_ranges,
    plan_catchup,
    trigger_instant,
    unpruned,
)
from zksched.core.firekey import fire_key, format_utc, jitter_of, parse_utc
from zksched.core.jobspec import JobSpec
from zksched.runtime.clock import Clock
from zksched.runtime.cluster import ClusterView
from zksched.runtime.firing import ClaimDrafts, FireKind, FirePath
from zksched.runtime.jobs import JobsSnapshot, Trigger
from zksched.runtime.leases import LEAD
from zksched.runtime.skips import SkipLog

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 2.0  # how often results that could not be written are retried
# Instants leave the heap this long before they are due (fired on time, not earlier)
STAGE_AHEAD = 0.25
PREPARE_THREADS = 8


@dataclass
class _Owned:
    spec: JobSpec
    updated_at: str
    generation: int


class FireScheduler:
    def __init__(
        self,
        fire_path: FirePath,
        skips: SkipLog,
        clock: Clock,
        concurrency: int = 32,
        take_trigger: Callable[[str], bool] | None = None,
    ) -> None:
        self._fire_path = fire_path
        self._skips = skips
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="zksched-fire")
        # taking locks ahead of fires: its own threads, so fires never queue behind it
        self._prepare_pool = ThreadPoolExecutor(
            max_workers=PREPARE_THREADS, thread_name_prefix="zksched-prepare"
        )
        # giving back locks of jobs no longer ours: never behind the takes queued before it
        # (a thousand, when a member owned every job for a moment), which blocked the jobs'
        # new owners for as long
        self._giveback_pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="zksched-giveback"
        )
        # one pass queued at most: a pass sees every change made before it starts, and
        # passes asked for faster than ZooKeeper answers must not pile up behind a slow one
        self._giveback_queued = False
        self._giveback_mutex = threading.Lock()
        self._take_trigger = take_trigger
        self._cv = threading.Condition()
        # (due, seq, job, generation, instant); instant None: take the job's lock ahead
        self._heap: list[tuple[float, int, str, int, datetime | None]] = []
        # due -> (job, generation, instant): taken off the heap, fired when due
        self._staged: dict[float, list[tuple[str, int, datetime]]] = {}
        # due -> the claims of its staged instants, being drafted (None: not worth it)
        self._drafts: dict[float, Future[ClaimDrafts] | None] = {}
        self._seq = itertools.count()
        self._generations = itertools.count(1)
        self._owned: dict[str, _Owned] = {}
        self._catching_up: dict[str, list[tuple[datetime, FireKind]]] = {}
        # job -> when a re-alignment last found it ours (connected): at or before the last
        # moment we owned it, so a catch-up on taking it back looks back far enough (only
        # real changes re-align: job table, membership, connection)
        self._last_active: dict[str, float] = {}
        self._jobs = JobsSnapshot(-1)
        self._view: ClusterView | None = None
        self._dirty = False
        self._stopping = threading.Event()
        self._dispatching = True
        self._thread: threading.Thread | None = None
        self._triggers_in_flight: set[str] = set()
        self._refused: set[tuple[str, str]] = set()  # (job, argv[0]) our allow-list refused
        self.heartbeat = 0.0
        # (job, instants to run), on a fire worker thread, for each catch-up (metrics)
        self.catchup_observers: list[Callable[[str, int], None]] = []

    # -- inputs (from other threads: store and wake, nothing else) ----------------------------

    def update_jobs(self, snapshot: JobsSnapshot) -> None:
        with self._cv:
            self._jobs = snapshot
            self._dirty = True
            self._cv.notify()

    def update_view(self, view: ClusterView) -> None:
        with self._cv:
            self._view = view
            self._dirty = True
            self._cv.notify()

    def next_due(self) -> float | None:
        """When the timer next hands a fire on or takes a lock ahead (epoch seconds; it
        takes instants off its heap up to STAGE_AHEAD before that)."""
        with self._cv:
            heads = [self._heap[0][0]] if self._heap else []
            return min([*self._staged, *heads], default=None)

    def owned_jobs(self) -> list[str]:
        with self._cv:
            return sorted(self._owned)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="zksched-timer", daemon=True)
            self._thread.start()

    def stop_dispatching(self) -> None:
        """No new fires from now on (graceful stop); running ones carry on."""
        with self._cv:
            self._dispatching = False
            self._heap.clear()
            self._staged.clear()
            for drafts in self._drafts.values():
                if drafts is not None:
                    drafts.cancel()
            self._drafts.clear()
            self._cv.notify()

    def stop(self, wait_for_running: float = 30.0) -> None:
        self.stop_dispatching()
        self._stopping.set()
        with self._cv:
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
        done = threading.Event()

        def drain() -> None:
            self._prepare_pool.shutdown(wait=True, cancel_futures=True)
            self._giveback_pool.shutdown(wait=True, cancel_futures=True)
            self._pool.shutdown(wait=True, cancel_futures=True)
            done.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + wait_for_running
        # Claims in progress drain from the pool; started commands finish on their own threads.
        finished = done.wait(wait_for_running) and self._fire_path.wait_idle(
            max(0.0, deadline - time.monotonic())
        )
        if not finished:
            log.warning("fires still running after %.0fs; terminating them", wait_for_running)
            self._fire_path.terminate_all("the daemon is stopping")
            done.wait(10)
            self._fire_path.wait_idle(10)

    # -- the timer thread -----------------------------------------------------------------------

    def _run(self) -> None:
        next_flush = 0.0
        while not self._stopping.is_set():
            # fires due at one time, and their claims being drafted
            batches: list[tuple[list[tuple[JobSpec, datetime, float]], Future[ClaimDrafts] | None]]
            batches = []
            to_draft: list[tuple[Future[ClaimDrafts], list[tuple[JobSpec, datetime, float]]]] = []
            prepare: list[str] = []
            fired: list[tuple[str, _Owned, datetime]] = []  # their next instants to schedule
            if self._clock.now() >= next_flush:
                next_flush = self._clock.now() + FLUSH_INTERVAL
                if (
                    self._fire_path.has_pending()
                    and self._view is not None
                    and (self._view.connected)
                ):
                    self._submit(self._fire_path.flush_unwritten)
                    self._submit(self._fire_path.retry_unresolved)
                if (
                    self._fire_path.leases.has_leftovers()
                    and self._view is not None
                    and self._view.connected
                ):
                    self._submit_give_back()
            with self._cv:
                self.heartbeat = self._clock.now()
                if self._dirty:
                    self._dirty = False
                    self._reconcile()
                now = self._clock.now()
                # Instants are taken off the heap STAGE_AHEAD early and wait in `_staged`: the
                # heap work and the next instants of a burst's jobs are then done before the
                # burst is due, not in its first milliseconds.
                while self._heap and self._heap[0][0] <= now + STAGE_AHEAD:
                    due_ts, _, name, generation, instant = heapq.heappop(self._heap)
                    owned = self._owned.get(name)
                    if owned is None or owned.generation != generation:
                        continue  # dropped or changed since it was scheduled
                    if instant is None:
                        prepare.append(name)
                        continue
                    fired.append((name, owned, instant))
                    self._staged.setdefault(due_ts, []).append((name, generation, instant))
                for due_ts in sorted(ts for ts in self._staged if ts <= now):
                    ready = self._dispatchable(due_ts, self._staged.pop(due_ts))
                    drafts = self._drafts.pop(due_ts, None)
                    if ready:
                        batches.append((ready, drafts))
                    elif drafts is not None:
                        drafts.cancel()
                for name, owned, instant in fired:
                    self._push_next(name, owned, instant)
                for due_ts in sorted({ts for ts in self._staged if ts > now} - set(self._drafts)):
                    to_draft += self._draft(due_ts)
                session = self._view.session_id if self._view is not None else None
                if not batches and not prepare and not fired:
                    self._cv.wait(max(self._wait_time(now), 0.0))
                    continue
            # what is due first, then the drafting of what is not yet
            for ready, drafts in batches:
                self._submit(self._fire_batch, ready, drafts)
            for future, items in to_draft:
                self._submit(self._run_draft, future, items)
            leases = self._fire_path.leases
            for name in prepare:
                if session is not None and not leases.ready(name, session):
                    self._submit_lock_work(self._fire_path.prepare, name, session)

    def _draft(
        self, due_ts: float
    ) -> list[tuple[Future[ClaimDrafts], list[tuple[JobSpec, datetime, float]]]]:
        """The claims of instants due together at `due_ts`, to be drafted while they wait (on
        the fire pool: the timer goes on). Called with the lock held, once per due time."""
        items = [
            (owned.spec, instant, due_ts)
            for name, generation, instant in self._staged[due_ts]
            if (owned := self._owned.get(name)) is not None
            and owned.generation == generation
            and name not in self._catching_up
        ]
        if len(items) < 2:  # a lone fire is claimed on its own anyway
            self._drafts[due_ts] = None
            return []
        future: Future[ClaimDrafts] = Future()
        self._drafts[due_ts] = future
        return [(future, items)]

    def _run_draft(
        self, future: Future[ClaimDrafts], items: list[tuple[JobSpec, datetime, float]]
    ) -> None:
        if not future.set_running_or_notify_cancel():
            return  # the instant came first: not drafted at all
        try:
            future.set_result(self._fire_path.draft(items))
        except Exception as exc:
            future.set_exception(exc)

    def _wait_time(self, now: float) -> float:
        """Seconds until the timer has something to do (at most 1): a staged instant due, or
        the heap's first entry to stage. Called with the lock held."""
        wake = now + 1.0
        if self._heap:
            wake = min(wake, self._heap[0][0] - STAGE_AHEAD)
        if self._staged:
            wake = min(wake, min(self._staged))
        return wake - now

    def _push_next(self, name: str, owned: _Owned, after: datetime) -> None:
        if not self._dispatching:
            return
        try:
            instant = owned.spec.schedule_obj.next_fire(after)
        except Exception:  # a schedule with no future instant (Feb 30): nothing to push
            return
        key = fire_key(name, instant)
        due_ts = instant.timestamp() + jitter_of(key, owned.spec.jitter)
        heapq.heappush(self._heap, (due_ts, next(self._seq), name, owned.generation, instant))
        if owned.spec.overlap == "skip":
            ahead = (due_ts - LEAD, next(self._seq), name, owned.generation, None)
            heapq.heappush(self._heap, ahead)

    def _dispatchable(
        self, due_ts: float, staged: list[tuple[str, int, datetime]]
    ) -> list[tuple[JobSpec, datetime, float]]:
        """Instants due now that go ahead, with their specs: not stale, and not waiting
        behind their job's catch-up. Called with the lock held."""
        ready = []
        for name, generation, instant in staged:
            owned = self._owned.get(name)
            if owned is None or owned.generation != generation or not self._dispatching:
                continue
            backlog = self._catching_up.get(name)
            if backlog is not None:
                backlog.append((instant, "scheduled"))  # runs after the catch-up, in order
                continue
            ready.append((owned.spec, instant, due_ts))
        return ready

    def _fire_batch(
        self, ready: list[tuple[JobSpec, datetime, float]], drafts: Future[ClaimDrafts] | None
    ) -> None:
        """Fires due together: claimed in one transaction where they can be; the rest
        (a lock to take first, a claim taken already) one by one on the pool. Their claims'
        drafts are used if they are ready (the fires never wait for them)."""
        made = None
        if drafts is not None and drafts.done():
            try:
                made = drafts.result()
            except Exception:
                log.exception("drafting the claims of %d fires failed", len(ready))
        elif drafts is not None:
            drafts.cancel()  # not started yet: not worth starting now
        for spec, instant, due_ts in self._fire_path.fire_many(ready, made):
            self._submit(self._fire_path.fire_handed_back, spec, instant, due_ts)

    def _submit_give_back(self) -> None:
        with self._giveback_mutex:
            if self._giveback_queued:
                return
            self._giveback_queued = True
        try:
            self._giveback_pool.submit(self._give_back_pass)
        except RuntimeError:  # the pool is shut down: we are stopping
            with self._giveback_mutex:
                self._giveback_queued = False

    def _give_back_pass(self) -> None:
        with self._giveback_mutex:
            self._giveback_queued = False  # from now on, a change needs a pass of its own
        self._guard(self._fire_path.leases.release_unowned)

    def _submit_lock_work(self, fn: Callable[..., object], *args: object) -> None:
        """Taking and giving back locks: on their own threads, never behind fires that
        wait for a concurrency slot."""
        with contextlib.suppress(RuntimeError):  # the pool is shut down: we are stopping
            self._prepare_pool.submit(self._guard, fn, *args)

    def _submit(self, fn: Callable[..., object], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the pool is shut down: we are stopping
            self._pool.submit(self._guard, fn, *args)

    @staticmethod
    def _guard(fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("a fire failed unexpectedly")

    # -- ownership --------------------------------------------------------------------------

    def _reconcile(self) -> None:
        """Called with the lock held: align the owned set with the table and the view."""
        view = self._view
        now = self._clock.now()
        desired: dict[str, tuple[JobSpec, str]] = {}
        if view is not None and view.active and self._dispatching:
            for name, entry in self._jobs.entries.items():
                spec = entry.spec
                if spec is None:
                    continue
                if view.owns(name, spec.labels, spec.command[0]):
                    desired[name] = (spec, entry.updated_at)
                elif view.owns(name, spec.labels):
                    # Ours by labels, refused by our allow-list: the table gave it to the
                    # next eligible member. Say so once per job and command.
                    self._note_refused(name, spec.command[0])
        dropped = 0
        for name in list(self._owned):
            owned = self._owned[name]
            want = desired.get(name)
            if want is None or want[0] != owned.spec or want[1] != owned.updated_at:
                del self._owned[name]
                self._catching_up.pop(name, None)
                dropped += 1
        taken: list[str] = []
        for name, (spec, updated_at) in desired.items():
            if name in self._owned:
                self._last_active[name] = now
                continue
            owned = _Owned(spec, updated_at, next(self._generations))
            self._owned[name] = owned
            taken.append(name)
            self._push_next(name, owned, datetime.fromtimestamp(now, UTC))
            since = self._last_active.get(name)
            self._last_active[name] = now
            self._begin_catchup(name, owned, now, since)
        for name in [n for n in self._last_active if n not in self._jobs.entries]:
            del self._last_active[name]
        if taken or dropped:
            # the locks of jobs no longer ours go back (not while disconnected: then they
            # stay until the session is known to be alive, or gone with it)
            self._fire_path.leases.set_owned(self._owned)
            self._submit_give_back()
            # also on drops alone, so the log always tells how many jobs this member owns
            log.info(
                "now owning %d jobs (%d taken over, %d dropped)",
                len(self._owned),
                len(taken),
                dropped,
                extra={
                    "event": "owned",
                    "owned": len(self._owned),
                    "taken": len(taken),
                    "dropped": dropped,
                },
            )

    def _note_refused(self, name: str, program: str) -> None:
        """Report a job this member's command allow-list refuses (lock held; once each)."""
        if (name, program) in self._refused:
            return
        self._refused = {k for k in self._refused if k[0] in self._jobs.entries}
        self._refused.add((name, program))
        self._skips.skip(
            name,
            "command-not-allowed",
            f"{program!r} is not in this member's allowed_commands; another member runs it",
        )

    def _begin_catchup(self, name: str, owned: _Owned, now: float, since: float | None) -> None:
        """Queue a catch-up if any instant could have been missed (lock held)."""
        spec = owned.spec
        lower = now - spec.catchup_window if since is None else since - 1.0
        with contextlib.suppress(ValueError):
            lower = max(lower, parse_utc(owned.updated_at).timestamp())
        now_dt = datetime.fromtimestamp(now, UTC)
        lower_dt = datetime.fromtimestamp(min(lower, now), UTC)
        if spec.schedule_obj.latest_fire(lower_dt, now_dt) is None:
            return  # nothing was due in the gap: no need to read the job's history
        self._catching_up[name] = []
        self._submit(self._catch_up, name, owned.generation, lower_dt, now_dt)

    def _catch_up(self, name: str, generation: int, lower: datetime, now: datetime) -> None:
        try:
            self._run_catchup(name, generation, lower, now)
        finally:
            self._finish_catchup(name, generation)

    def _run_catchup(self, name: str, generation: int, lower: datetime, now: datetime) -> None:
        with self._cv:
            owned = self._owned.get(name)
            if owned is None or owned.generation != generation:
                return
            spec = owned.spec
        try:
            instants = self._fire_path.claims.instants(name)
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("catch-up of %s postponed: cannot read its history (%s)", name, exc)
            with self._cv:
                self._dirty = True
                if self._owned.get(name) is owned:
                    del self._owned[name]  # re-taken (and caught up) on the next reconcile
                self._cv.notify()
            return
        self._fire_path.remember_history(name, instants)
        recorded: list[datetime] = []
        for text in instants:
            with contextlib.suppress(ValueError):
                recorded.append(parse_utc(text))
        newest = newest_scheduled(spec.schedule_obj, recorded)
        after = lower if newest is None else max(lower, newest)
        plan = plan_catchup(spec.schedule_obj, spec.catchup, spec.catchup_window, after, now)
        behind = self._holes(spec, recorded, lower)
        if plan.skipped:
            span = (
                f"{format_utc(plan.first_skipped)}..{format_utc(plan.last_skipped)}"
                if (plan.first_skipped and plan.last_skipped)
                else ""
            )
            self._skips.skip(
                name,
                "outside-catchup-window",
                f"{plan.skipped} missed instants {span} (catchup = {spec.catchup})",
                count=plan.skipped,
            )
            # The newest skipped instant is the one just before the first run (or before
            # now): the plan counts at most COUNT_LIMIT, so its last_skipped may fall short.
            newest = spec.schedule_obj.latest_fire(
                after, plan.run[0] - timedelta(microseconds=1) if plan.run else now
            )
            with self._cv:
                current = self._owned.get(name)
                still_owned = current is not None and current.generation == generation
            if still_owned and plan.first_skipped is not None and newest is not None:
                self._fire_path.record_skip_range(spec, plan.first_skipped, newest, plan.skipped)
        run = self._settle_holes(spec, generation, behind, now) + list(plan.run)
        if run:
            log.info(
                "catching up %s: %d missed instants (catchup = %s)",
                name,
                len(run),
                spec.catchup,
                extra={"event": "catchup", "job": name, "count": len(run)},
            )
            for observer in self.catchup_observers:
                observer(name, len(run))
        for instant in run:
            with self._cv:
                current = self._owned.get(name)
                if current is None or current.generation != generation or not self._dispatching:
                    return
            self._fire_path.fire(spec, instant, "catchup")

    def _settle_holes(
        self, spec: JobSpec, generation: int, behind: list[datetime], now: datetime
    ) -> list[datetime]:
        """The holes to run now (catchup = all, inside the window), oldest first; the others
        are recorded as `outside-catchup-window` skips, so that none stays open."""
        if not behind:
            return []
        window_start = now - timedelta(seconds=spec.catchup_window)
        refill = [h for h in behind if spec.catchup == "all" and h > window_start]
        refilled = set(refill)
        passed = [h for h in behind if h not in refilled]
        log.warning(
            "%s: %d instants behind newer records never ran (%s): %s",
            spec.name,
            len(behind),
            "running them" if not passed else f"catchup = {spec.catchup}: skipping them",
            ", ".join(format_utc(h) for h in behind[:5]) + (" …" if len(behind) > 5 else ""),
            extra={"event": "holes", "job": spec.name, "count": len(behind)},
        )
        with self._cv:
            current = self._owned.get(spec.name)
            still_owned = current is not None and current.generation == generation
        for hole in passed:
            self._skips.skip(
                spec.name, "outside-catchup-window", f"{format_utc(hole)} behind newer records"
            )
            if still_owned:
                self._fire_path.record_skip_range(spec, hole, hole, 1)
        return refill

    def _holes(self, spec: JobSpec, recorded: list[datetime], lower: datetime) -> list[datetime]:
        """Instants behind the job's newer records that never ran (`core.catchup`): no record,
        not pruned, not inside a skip range; [] when what would tell cannot be read."""
        found = holes(spec.schedule_obj, recorded, lower)
        if not found:
            return []
        claims = self._fire_path.claims
        try:
            horizon = claims.pruned_through(spec.name)
            after = [format_utc(r) for r in next_records(found, recorded)]
            records = claims.read_many(spec.name, after)
        except Exception as exc:  # kazoo can also surface its connection loop's own errors
            # never the rest of the catch-up: these holes are only looked for again later
            log.warning("%s: instants behind newer records left alone (%r)", spec.name, exc)
            return []
        try:
            pruned = None if horizon is None else parse_utc(horizon)
        except ValueError:
            return []  # an unreadable horizon: anything may have been pruned
        found = unpruned(found, pruned, len(recorded), max(1, spec.history))
        ranges = []
        for record in records.values():
            if record is None or record.state != "skipped":
                continue
            with contextlib.suppress(ValueError, TypeError):
                first = parse_utc(str(record.extra.get("covers_from", record.scheduled)))
                ranges.append((first, parse_utc(record.scheduled)))
        return outside_ranges(found, ranges)

    def _finish_catchup(self, name: str, generation: int) -> None:
        """Run what came due during the catch-up, in order, then hand back to the timer."""
        while True:
            with self._cv:
                owned = self._owned.get(name)
                backlog = self._catching_up.get(name)
                if owned is None or owned.generation != generation or not backlog:
                    self._catching_up.pop(name, None)
                    return
                instant, kind = backlog.pop(0)
                spec = owned.spec
            self._fire_path.fire(spec, instant, kind)

    # -- manual triggers ----------------------------------------------------------------------

    def triggers(self, pending: list[Trigger]) -> None:
        """Run each pending trigger of a job we own, once (deleting its node claims it)."""
        for trigger in pending:
            with self._cv:
                owned = self._owned.get(trigger.job)
                if owned is None or trigger.znode in self._triggers_in_flight:
                    continue
                self._triggers_in_flight.add(trigger.znode)
                spec = owned.spec
            self._submit(self._run_trigger, trigger, spec)

    def _run_trigger(self, trigger: Trigger, spec: JobSpec) -> None:
        try:
            if self._take_trigger is not None and not self._take_trigger(trigger.znode):
                return  # another member took it
            now = datetime.fromtimestamp(self._clock.now(), UTC)
            instant = trigger_instant(spec.schedule_obj, now)
            self._fire_path.fire(spec, instant, "trigger", now.timestamp())
        finally:
            with self._cv:
                self._triggers_in_flight.discard(trigger.znode)
