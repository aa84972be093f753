"""One fire, from a due instant to a recorded result.

    due -> connected? -> owner? -> paused? -> [lock, if overlap = skip] -> claim -> run -> record

The claim (a create keyed by job and UTC instant) is the gate: whoever creates it runs the
instant, everyone else skips with `already-claimed`. The lock keeps two instants of one job
from overlapping; the member holds it across fires while it owns the job (leases.py), so a
frequent job's fire costs its claim and its result write only. When the session may be
gone (SUSPENDED past the margin, or LOST) or our lock node vanishes mid-run, a running
command is terminated or left alone by the `on_session_loss` setting: `terminate` by
default, because once the session can have expired another member may already run the
job's next instant.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from zksched.core.firekey import fire_key, format_utc
from zksched.core.fires import ClaimDraft, FireRecord, FireState
from zksched.core.jobspec import JobSpec
from zksched.core.owners import command_allowed
from zksched.runtime.clock import Clock
from zksched.runtime.cluster import ClusterMembership, ClusterView
from zksched.runtime.leases import LINGER, JobLeases
from zksched.runtime.results import ResultWriter
from zksched.runtime.runner import (
    CommandRunner,
    ProgramLookup,
    RunningCommand,
    RunRequest,
    RunResult,
)
from zksched.runtime.skips import SkipLog
from zksched.zk.claims import AlreadyClaimed, Claimed, ClaimOutcome, FireClaims
from zksched.zk.locks import JobLock, LockAttempt
from zksched.zk.paths import ClusterPaths

log = logging.getLogger("zksched.fire")

CLAIM_BATCH = 200  # fires claimed in one transaction at most (~100 KB, far below 1 MB)
FIRST_CLAIMS = 100  # fires due together claimed first, alone (`_claim_answers`)
STARTERS = 4  # threads that start the commands of fires claimed together
LOCKERS = 16  # threads that take the locks of fires due together that this member lacks
LOCK_WAIT = 0.25  # how long a fire waits for its job's lock to be given back or let go of

FireKind = Literal["scheduled", "catchup", "trigger"]
# A claim made this many seconds or more after its instant checks the pruning horizon
# (`FireClaims.claim_late`); so do fires due together that are claimed BATCH_CLAIM_AGE or
# more after theirs (handed back, one by one). Plain creates are left for claims younger
# than that, and no record younger than PRUNE_MIN_AGE (on the pruner's clock) is ever
# pruned: so a plain create never targets a pruned instant while the members' clocks are
# less than PRUNE_MIN_AGE - BATCH_CLAIM_AGE apart, whatever the job's `history`.
LATE_CLAIM_AGE = 1.0
BATCH_CLAIM_AGE = 20.0
PRUNE_MIN_AGE = 60.0
PRUNE_SLACK = 5  # prune history in batches: one transaction per few fires, not one per fire
# the longest results of fires due together wait after their starts (`_results_wait`)
SETTLE = 1.5


@dataclass(frozen=True)
class FireSettings:
    client_id: str
    member_id: str
    on_session_loss: Literal["terminate", "continue"] = "terminate"
    call_timeout: float = 3.0
    allowed_commands: tuple[str, ...] | None = None  # None: every command may run here
    concurrency: int = 32  # commands running at once on this member


@dataclass(frozen=True)
class _Retry:
    """A fire that failed on the connection, to settle once ZooKeeper answers."""

    spec: JobSpec
    instant: datetime
    kind: FireKind
    due_at: float
    record: FireRecord | None  # the claim attempt whose outcome is unknown, if any
    # deferred (waiting for a lock): the job's later instants wait behind it until settled
    holds_back: bool = False


class _Claiming(NamedTuple):
    """A fire of a batch being claimed: its claim record and that record's JSON."""

    spec: JobSpec
    instant: datetime
    t_due: float
    lock: JobLock | None
    record: FireRecord
    payload: bytes


class _Locking(NamedTuple):
    """A fire of a batch whose job's lock is taken first (`FirePath._take_locks`)."""

    spec: JobSpec
    instant: datetime
    t_due: float
    draft: ClaimDraft | None


LockTaken = tuple[LockAttempt, JobLock | None]


@dataclass(frozen=True)
class _OurFire:
    """A fire whose claim is ours: what its run, its result and its report need."""

    spec: JobSpec
    claimed: Claimed
    lock: JobLock | None
    t_due: float
    t_claimed: float

    @property
    def key(self) -> str:
        return self.claimed.record.fire_key


@dataclass
class _Running:
    command: RunningCommand
    lock: JobLock | None
    fire_key: str


@dataclass(frozen=True)
class ClaimDrafts:
    """Claims of fires due together, made ahead of their instant (`FirePath.draft`). They
    hold while the cluster view they were made with is the current one, each for the very
    spec it was made from."""

    view: ClusterView
    by_fire: dict[tuple[str, datetime], tuple[JobSpec, ClaimDraft]]


@dataclass
class FireStats:
    """Counters for tests, benchmarks and metrics."""

    fired: int = 0
    results: dict[str, int] = field(default_factory=dict)
    claims_drafted: int = 0  # claims sent as drafted ahead (`FirePath.draft`)


class FirePath:
    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        membership: ClusterMembership,
        runner: CommandRunner,
        skips: SkipLog,
        settings: FireSettings,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._paths = paths
        self._membership = membership
        self._runner = runner
        self._skips = skips
        self._settings = settings
        self._clock = clock or Clock()
        self._claims = FireClaims(client, paths, settings.call_timeout)
        self._running: dict[str, _Running] = {}
        self._running_lock = threading.Lock()
        # jobs with scheduled fires handed back by fire_many, not yet fired (_running_lock)
        self._handed_back: Counter[str] = Counter()
        self._history: dict[str, list[str]] = {}  # job -> known record instants, oldest first
        self._history_lock = threading.Lock()
        self._unwritten: list[tuple[Claimed, FireRecord]] = []
        self._retries: list[_Retry] = []
        self._settling: list[_Retry] = []  # taken by passes under way, not settled yet
        # the job's spec as it is now, if unchanged since an instant (the daemon sets it):
        # retries fire with it, or not at all; None: with the spec they were made with
        self.spec_of: Callable[[str, datetime | None], JobSpec | None] | None = None
        self._leases = JobLeases(client, paths, settings.member_id, settings.call_timeout)
        self._results = ResultWriter(
            self._claims,
            self._write_result,
            self._keep_unwritten,
            self._leases.release_many,
            hold=self._results_wait,
        )
        self._slots = threading.BoundedSemaphore(settings.concurrency)
        self._starters = ThreadPoolExecutor(STARTERS - 1, thread_name_prefix="zksched-start")
        self._lockers = ThreadPoolExecutor(LOCKERS, thread_name_prefix="zksched-lock")
        self._in_flight = 0  # fires claimed and not yet recorded (guarded by _idle)
        self._firing = 0  # calls of fire/fire_many going on (guarded by _idle)
        # batches of fires being claimed and started together (fire_many; guarded by _idle).
        # Results wait for these only: a single fire (a catch-up's, a trigger's) waits for
        # its own run, and its next instant for the lock its result's write gives back.
        self._batches = 0
        self._settled_at = -math.inf  # monotonic: results wait until then (guarded by _idle)
        self._terminating = False  # terminate_all was called: start no more commands
        self._idle = threading.Condition()
        self.stats = FireStats()
        self.observers: list[Callable[[Mapping[str, object]], None]] = []
        membership.add_session_loss_listener(self._on_session_lost)

    @property
    def claims(self) -> FireClaims:
        return self._claims

    @property
    def leases(self) -> JobLeases:
        return self._leases

    def _another_fire_has_lease(self, job: str, attempt: LockAttempt, lock: JobLock | None) -> bool:
        """`take` said HELD by this member (no lock to name another holder), yet no command
        of the job runs here: another fire of the job has its lease (a later instant that got
        in first, a lock taken ahead) and is about to claim or give it back. No
        `still-running`, which would lose the instant: it is retried after that fire."""
        if attempt is not LockAttempt.HELD or lock is not None:
            return False
        prefix = f"{job}@"
        with self._running_lock:
            return not any(key.startswith(prefix) for key in self._running)

    def running_jobs(self) -> list[str]:
        with self._running_lock:
            return sorted({r.fire_key.split("@", 1)[0] for r in self._running.values()})

    def remember_history(self, job: str, instants: list[str]) -> None:
        with self._history_lock:
            self._history[job] = sorted(instants)

    # -- the fire --------------------------------------------------------------------------

    def fire(
        self,
        spec: JobSpec,
        instant: datetime,
        kind: FireKind = "scheduled",
        due_at: float | None = None,
        wait: bool = True,
        remote_wait: float = 0.25,
    ) -> str:
        """Run one fire; returns its outcome (a result state or `skip:<reason>`, or
        `deferred` when it waits for another member to let go of the job's lock)."""
        self._enter()
        try:
            return self._fire(spec, instant, kind, due_at, wait, remote_wait)
        finally:
            self._leave()

    def fire_handed_back(self, spec: JobSpec, instant: datetime, due_at: float) -> str:
        """A scheduled fire that `fire_many` handed back, fired on its own (without waiting
        for its command); until it is, later instants of its job are handed back too, so
        that none of them is claimed or run before it (nor while it is deferred)."""
        try:
            return self.fire(spec, instant, "scheduled", due_at, wait=False)
        finally:
            self._release_hold(spec.name)

    def _release_hold(self, job: str) -> None:
        with self._running_lock:
            self._handed_back[job] -= 1
            if self._handed_back[job] <= 0:
                del self._handed_back[job]

    def _deferred_before(self, spec: JobSpec, instant: datetime) -> bool:
        with self._running_lock:
            return any(
                r.holds_back and r.spec.name == spec.name and r.instant < instant
                for r in (*self._retries, *self._settling)
            )

    def _defer(self, retry: _Retry) -> str:
        """Retry a fire once the lock it waits for is free. Until then the job's later
        instants are handed back (`fire_many`), so that none takes the lock first and makes
        this one overlap its run (a `still-running` skip of an instant whose turn came
        while no run of the job was going on)."""
        with self._running_lock:
            self._handed_back[retry.spec.name] += 1
            self._retries.append(retry)
        return "deferred"

    def _fire(
        self,
        spec: JobSpec,
        instant: datetime,
        kind: FireKind,
        due_at: float | None,
        wait: bool,
        remote_wait: float,
    ) -> str:
        key = fire_key(spec.name, instant)
        scheduled = format_utc(instant)
        view = self._membership.view
        refused = self._refusal(spec, key, kind, view)
        if refused is not None or view.session_id is None:
            return refused or "moved"
        t_due = due_at if due_at is not None else instant.timestamp()

        lock: JobLock | None = None
        if spec.overlap == "skip" and kind != "trigger" and self._deferred_before(spec, instant):
            log.info(
                "%s: an earlier instant of the job waits for its lock; retried after it",
                key,
                extra={"event": "lease-wait", "fire_key": key},
            )
            return self._defer(_Retry(spec, instant, kind, t_due, None, holds_back=True))
        if spec.overlap == "skip":
            attempt, lock = self._leases.take(spec.name, view.session_id, LOCK_WAIT, remote_wait)
            if attempt is LockAttempt.HELD and lock is not None and not self._holder_runs(spec):
                # Another member holds the lock between runs: it has not let go of a job
                # it no longer owns yet, or it died and its session has not expired. No run
                # is going on, so this is no `still-running` skip: fired once it lets go.
                log.info(
                    "%s: waiting for %s to let go of the job's lock",
                    key,
                    lock.holder(),
                    extra={"event": "lock-wait", "fire_key": key},
                )
                return self._defer(_Retry(spec, instant, kind, t_due, None, holds_back=True))
            if self._another_fire_has_lease(spec.name, attempt, lock):
                log.info(
                    "%s: another fire of the job has its lease; retried after it",
                    key,
                    extra={"event": "lease-wait", "fire_key": key},
                )
                return self._defer(_Retry(spec, instant, kind, t_due, None, holds_back=True))
            if attempt is LockAttempt.HELD:
                # Recorded, so that catch-up does not run it later; only while still connected
                # in the same session (else nothing is known and the instant stays open).
                if self._membership.view.session_id == view.session_id:
                    self._record_skip(spec, scheduled, kind, view.session_id, "still-running")
                holder = lock.holder() if lock is not None else "this member's previous run"
                return self._skip(spec.name, "still-running", f"{key}: held by {holder}")
            if attempt is LockAttempt.UNKNOWN:
                # Not recorded, and retried once ZooKeeper answers (a new owner would catch it
                # up, but this member may well stay the owner).
                self._defer(_Retry(spec, instant, kind, t_due, None, holds_back=True))
                return self._skip(spec.name, "claim-error", f"{key}: lock attempt failed")

        record = self._new_record(spec.name, scheduled, view.session_id, "running", kind)
        # Seconds behind its instant, other members may have run it and pruned its record
        # meanwhile (a job that moved away and back): such a claim checks the horizon.
        late = kind == "catchup" or self._clock.now() - instant.timestamp() >= LATE_CLAIM_AGE
        outcome = self._claim(record, spec.labels, spec.command[0], late)
        t_claimed = self._clock.now()
        if not isinstance(outcome, Claimed):
            if lock is not None:
                self._leases.give_back(spec.name, lock, keep=True)
            if outcome is None:
                # The create may have landed: resolved (and then run, or re-claimed) once
                # ZooKeeper answers, so that the instant is not lost while we stay the owner.
                self._queue_retry(_Retry(spec, instant, kind, t_due, record))
                return self._skip(spec.name, "claim-error", key)
            if outcome.pruned:
                holder = "a record pruned since (it is behind the job's pruning horizon)"
            else:
                holder = outcome.record.member_id if outcome.record else "unreadable record"
            return self._skip(spec.name, "already-claimed", f"{key} by {holder}")
        self._note_history(spec.name, scheduled)
        return self._run(_OurFire(spec, outcome, lock, t_due, t_claimed), wait)

    def draft(self, due: list[tuple[JobSpec, datetime, float]]) -> ClaimDrafts:
        """Ahead of scheduled fires due together: the claim of each one that may fire as
        things stand now, built and encoded, so that at the instant `fire_many` only sends
        them. Nothing is claimed, logged or counted here."""
        view = self._membership.view
        session = view.session_id
        drafts: dict[tuple[str, datetime], tuple[JobSpec, ClaimDraft]] = {}
        if session is not None:
            for spec, instant, _ in due:
                if self._why_not(spec, "scheduled", view) is None:
                    record = self._scheduled_claim(spec, instant, session, claimed_at="")
                    drafts[(spec.name, instant)] = (spec, ClaimDraft.of(record))
        return ClaimDrafts(view, drafts)

    def fire_many(
        self, due: list[tuple[JobSpec, datetime, float]], drafts: ClaimDrafts | None = None
    ) -> list[tuple[JobSpec, datetime, float]]:
        """Scheduled fires due together: those ready to go (connected, ours, and for
        `overlap = "skip"` jobs their lock held here) are claimed in one transaction and
        started; then those whose locks had to be taken (all at once), and those whose
        previous fires gave their locks back within `LOCK_WAIT`, claimed together in turn.
        The rest is returned, each to be fired on its own with `fire_handed_back` (until
        then the job's later instants are handed back too). `drafts`: their claims made
        ahead (`draft`), used where they still hold."""
        self._enter()
        with self._idle:
            self._batches += 1
        began = time.monotonic()
        try:
            rest = self._fire_many(due, drafts)
            with self._running_lock:
                self._handed_back.update(spec.name for spec, _, _ in rest)
            return rest
        finally:
            ended = time.monotonic()
            with self._idle:
                self._batches -= 1
                # as long again as this batch took: the other members' batches of the same
                # instant take about as long (at most SETTLE; a member whose batches come
                # every second writes its results between them, not on top of the next)
                settled = ended + min(SETTLE, ended - began)
                self._settled_at = max(self._settled_at, settled)
            self._leave()

    def _fire_many(
        self, due: list[tuple[JobSpec, datetime, float]], drafts: ClaimDrafts | None
    ) -> list[tuple[JobSpec, datetime, float]]:
        view = self._membership.view
        session = view.session_id
        claimed_at = self._clock.iso()  # one for the batch: its claims go out together
        # Drafts made with this very view (and below, this very spec) passed the same checks;
        # they are only ever made while the view has a session.
        drafted = {}
        if drafts is not None and drafts.view is view and session is not None:
            drafted = drafts.by_fire
        batch: list[_Claiming] = []
        to_lock: list[_Locking] = []
        in_use: list[_Locking] = []  # the job's previous fire still has its lock
        rest: list[tuple[JobSpec, datetime, float]] = []
        from_drafts = 0
        with self._running_lock:  # jobs with an earlier instant handed back, not yet fired
            behind = set(self._handed_back)
        now = self._clock.now()
        for spec, instant, t_due in due:
            if now - instant.timestamp() >= BATCH_CLAIM_AGE:
                rest.append((spec, instant, t_due))  # one by one, as late claims
                continue
            draft = drafted.get((spec.name, instant))
            if draft is None or draft[0] is not spec:
                draft = None
                key = fire_key(spec.name, instant)
                if self._refusal(spec, key, "scheduled", view) is not None:
                    continue
            if session is None:  # refused as not-connected above
                continue
            if spec.name in behind:  # an earlier instant goes one by one: this one after it
                rest.append((spec, instant, t_due))
                continue
            made = None if draft is None else draft[1]
            lock = None
            if spec.overlap == "skip":
                lock = self._leases.take_if_held(spec.name, session)
                if lock is None:
                    fire = _Locking(spec, instant, t_due, made)
                    (in_use if self._leases.in_use(spec.name) else to_lock).append(fire)
                    continue
            batch.append(self._claiming(spec, instant, t_due, lock, session, claimed_at, made))
            from_drafts += made is not None
        # Locks not held here yet (jobs just taken over or applied) are taken all at once
        # while the others are claimed and started, and claimed together after; so are the
        # fires whose previous fires give their locks back soon. One by one, hundreds of
        # such fires kept a member seconds behind for many seconds (and so on, in turn).
        if session is None:
            return rest
        taking = self._take_locks(to_lock, session) if to_lock else []
        rest += self._claim_and_start(batch, from_drafts)
        if taking:
            rest += self._claim_and_start_locked(to_lock, taking, view)
        if in_use:
            rest += self._claim_and_start_given_back(in_use, view)
        return rest

    def _claiming(
        self,
        spec: JobSpec,
        instant: datetime,
        t_due: float,
        lock: JobLock | None,
        session: int,
        claimed_at: str,
        draft: ClaimDraft | None,
    ) -> _Claiming:
        """A fire's claim as it goes out: its draft sent at `claimed_at`, or made now."""
        if draft is not None:
            record, payload = draft.sent_at(claimed_at)
        else:
            record = self._scheduled_claim(spec, instant, session, claimed_at)
            payload = record.to_json()
        return _Claiming(spec, instant, t_due, lock, record, payload)

    def _take_locks(self, fires: list[_Locking], session: int) -> list[Future[LockTaken] | None]:
        """Start taking the locks of `fires` on the lock threads (None: not started)."""
        taking: list[Future[LockTaken] | None] = []
        for fire in fires:
            try:
                job = fire.spec.name
                taking.append(self._lockers.submit(self._leases.take, job, session, LOCK_WAIT))
            except RuntimeError:  # shut down (interpreter exit): one by one instead
                taking.append(None)
        return taking

    def _claim_and_start_locked(
        self, fires: list[_Locking], taking: list[Future[LockTaken] | None], view: ClusterView
    ) -> list[tuple[JobSpec, datetime, float]]:
        """The fires whose locks were being taken (`_take_locks`): those taken are claimed
        together and started; the rest is returned, to be fired one by one (which tells a
        lock held elsewhere from one that could not be taken, and says so)."""
        rest: list[tuple[JobSpec, datetime, float]] = []
        locked: list[tuple[_Locking, JobLock]] = []
        for fire, future in zip(fires, taking, strict=True):
            attempt, lock = LockAttempt.UNKNOWN, None
            if future is not None:
                try:
                    attempt, lock = future.result()
                except Exception:
                    log.exception("taking the lock of %s failed", fire.spec.name)
            if attempt is LockAttempt.ACQUIRED and lock is not None:
                locked.append((fire, lock))
            else:
                rest.append((fire.spec, fire.instant, fire.t_due))
        return rest + self._claim_and_start_held(locked, view)

    def _claim_and_start_given_back(
        self, fires: list[_Locking], view: ClusterView
    ) -> list[tuple[JobSpec, datetime, float]]:
        """The fires whose jobs' previous fires still had the locks: those given back within
        the wait a single fire would grant them are claimed together and started; the rest
        is returned, to be fired one by one (`still-running` if their runs go on)."""
        session = view.session_id
        if session is None:
            return [(f.spec, f.instant, f.t_due) for f in fires]
        given = self._leases.take_given_back([f.spec.name for f in fires], session, LOCK_WAIT)
        rest = [(f.spec, f.instant, f.t_due) for f in fires if f.spec.name not in given]
        held = [(f, given[f.spec.name]) for f in fires if f.spec.name in given]
        return rest + self._claim_and_start_held(held, view)

    def _claim_and_start_held(
        self, held: list[tuple[_Locking, JobLock]], view: ClusterView
    ) -> list[tuple[JobSpec, datetime, float]]:
        """Fires whose locks this batch has just come by: claimed together (claimed now)
        and started. If the cluster view changed meanwhile, their locks go back and each
        fire is returned, to check it again on its own."""
        session = view.session_id
        if self._membership.view is not view or session is None:
            for fire, lock in held:
                self._leases.give_back(fire.spec.name, lock, keep=True)
            return [(f.spec, f.instant, f.t_due) for f, _ in held]
        # the locks may have taken long to come by: aged ones go one by one, as late claims
        now = self._clock.now()
        aged: list[tuple[_Locking, JobLock]] = []
        fresh: list[tuple[_Locking, JobLock]] = []
        for pair in held:
            (aged if now - pair[0].instant.timestamp() >= BATCH_CLAIM_AGE else fresh).append(pair)
        for fire, lock in aged:
            self._leases.give_back(fire.spec.name, lock, keep=True)
        held = fresh
        claimed_at = self._clock.iso()
        batch = [
            self._claiming(f.spec, f.instant, f.t_due, lock, session, claimed_at, f.draft)
            for f, lock in held
        ]
        rest = [(f.spec, f.instant, f.t_due) for f, _ in aged]
        return rest + self._claim_and_start(batch, sum(f.draft is not None for f, _ in held))

    def _claim_and_start(
        self, batch: list[_Claiming], from_drafts: int
    ) -> list[tuple[JobSpec, datetime, float]]:
        """Claim `batch` in transactions and start the fires claimed; returns those to fire
        one by one (a batch of one, or a transaction that did not apply)."""
        rest: list[tuple[JobSpec, datetime, float]] = []
        if len(batch) < 2:
            self._give_back_all(batch)
            return [(c.spec, c.instant, c.t_due) for c in batch]
        with self._running_lock:
            self.stats.claims_drafted += from_drafts
        first = batch[:FIRST_CLAIMS]
        chunks = [first] + [
            batch[i : i + CLAIM_BATCH] for i in range(len(first), len(batch), CLAIM_BATCH)
        ]
        answers = self._claim_answers(chunks)
        for chunk, claimed in zip(chunks, answers, strict=True):
            t_claimed = self._clock.now()
            if isinstance(claimed, Exception):  # it may have applied: settle each later
                log.warning("claim of %d fires failed (%s); settling them", len(chunk), claimed)
                self._give_back_all(chunk)
                for c in chunk:
                    self._queue_retry(_Retry(c.spec, c.instant, "scheduled", c.t_due, c.record))
                    self._skip(c.spec.name, "claim-error", c.record.fire_key)
            elif claimed is None:  # not applied at all: one by one, which tells who has what
                self._give_back_all(chunk)
                rest += [(c.spec, c.instant, c.t_due) for c in chunk]
            else:
                ours = []
                for c, outcome in zip(chunk, claimed, strict=True):
                    self._note_history(c.spec.name, c.record.scheduled)
                    ours.append(_OurFire(c.spec, outcome, c.lock, c.t_due, t_claimed))
                self._start_all(ours)
        return rest

    def _claim_answers(self, chunks: list[list[_Claiming]]) -> Iterator[ClaimOutcome]:
        """Each chunk's claim outcome, in order, as soon as its reply is in. The first chunk
        goes alone and the rest the moment its reply is in, all before its fires start
        (starts would slow the sending down: one interpreter lock): at a common instant
        every member's first claims are then answered first, and its starts begin while
        ZooKeeper answers the rest, instead of after every member's claims."""

        def send(part: list[list[_Claiming]]) -> Iterator[ClaimOutcome]:
            try:
                sent = self._claims.send_batches(
                    [[c.record for c in chunk] for chunk in part],
                    [[c.payload for c in chunk] for chunk in part],
                )
            except Exception as exc:  # before or while sending: settle each like an unknown
                return iter([exc] * len(part))
            return self._claims.answers(sent)

        head = next(send(chunks[:1]))
        rest = send(chunks[1:]) if len(chunks) > 1 else iter(())
        yield head
        yield from rest

    def _start_all(self, fires: list[_OurFire]) -> None:
        """Start claimed fires from `STARTERS` threads at once: a start mostly waits for the
        kernel to set the child up (without the interpreter lock), and others can go
        meanwhile. Returns once every one has started (or failed to)."""
        slices = [fires[i::STARTERS] for i in range(STARTERS)]
        programs = ProgramLookup()  # for this batch only: argv[0] looked up once
        helpers = []
        for part in slices[1:]:
            if part:
                try:
                    helpers.append(self._starters.submit(self._start_each, part, programs))
                except RuntimeError:  # shut down (interpreter exit): start them here
                    self._start_each(part, programs)
        self._start_each(slices[0], programs)
        for helper in helpers:
            helper.result()

    def _start_each(self, fires: list[_OurFire], programs: ProgramLookup) -> None:
        for fire in fires:
            try:
                self._run(fire, wait=False, programs=programs)
            except Exception:
                log.exception("%s: could not be started", fire.key)

    def close(self) -> None:
        """After the daemon's stop: the start helpers' threads and the runner's /dev/null go
        (a fire after this still starts, from the calling thread)."""
        self._starters.shutdown(wait=False)
        self._lockers.shutdown(wait=False)
        self._runner.close()

    def prepare(self, job: str, session_id: int) -> None:
        """Ahead of a job's fire (the scheduler, `leases.LEAD` seconds before): take its
        lock, and make its fire folder on its first fire, so that the fire only claims."""
        self._leases.prepare(job, session_id)
        try:
            self._claims.ensure_folder(job)
            with self._history_lock:
                known = job in self._history
            if not known:  # listed now, not right after a burst's results (see _prune)
                self.remember_history(job, self._claims.instants(job))
        except Exception as exc:  # the claim makes the folder; _prune lists the history
            log.debug("fire folder or history of %s not read ahead: %s", job, type(exc).__name__)

    def _give_back_all(self, batch: list[_Claiming]) -> None:
        for c in batch:
            if c.lock is not None:
                self._leases.give_back(c.spec.name, c.lock, keep=True)

    def _refusal(self, spec: JobSpec, key: str, kind: FireKind, view: ClusterView) -> str | None:
        """Why this member must not fire the job now (a skip, or "moved"); None: go on."""
        why = self._why_not(spec, kind, view)
        if why is None:
            return None
        reason, detail = why
        if reason == "moved":
            log.debug("%s: no longer the owner; leaving it to the new one", key)
            return "moved"
        return self._skip(spec.name, reason, key + detail)

    def _why_not(self, spec: JobSpec, kind: FireKind, view: ClusterView) -> tuple[str, str] | None:
        """(skip reason or "moved", detail) when this member must not fire the job; None: go
        on. No side effects: drafts ask it ahead of the instant."""
        if not view.connected or view.session_id is None:
            return "not-connected", ""
        if not command_allowed(self._settings.allowed_commands, spec.command[0]):
            # Defence in depth: the owner table already leaves us out, unless it is stale.
            return "command-not-allowed", f": {spec.command[0]!r} is not allowed here"
        if kind != "trigger" and not view.owns(spec.name, spec.labels, spec.command[0]):
            return "moved", ""
        if spec.paused and kind != "trigger":
            return "paused", ""
        return None

    def _holder_runs(self, spec: JobSpec) -> bool:
        """Whether the job's newest fire record says a run is going on (claimed, not yet
        recorded as ended). Unknown (a read failed): treated as not, so that the instant
        is retried rather than skipped for good."""
        try:
            newest = self._claims.newest([spec.name])
        except Exception:
            return False
        if spec.name not in newest:
            return False
        record = newest[spec.name]
        return record is None or record.state == "running"

    def _claim(
        self,
        record: FireRecord,
        labels: Mapping[str, str],
        program: str | None = None,
        late: bool = False,
    ) -> Claimed | AlreadyClaimed | None:
        """Claim, or find out what became of a claim whose reply was lost. None: unknown.
        `late`: behind the job's pruning horizon counts as claimed (`FireClaims.claim_late`)."""
        create = self._claims.claim_late if late else self._claims.claim
        try:
            return create(record)
        except Exception as exc:  # kazoo can also surface its connection loop's own errors
            log.warning(
                "claim of %s@%s failed (%s); finding out whether it landed",
                record.job,
                record.scheduled,
                type(exc).__name__,
            )
        deadline = time.monotonic() + self._membership.loss_margin
        while time.monotonic() < deadline:
            if self._client.connected:
                try:
                    found = self._claims.resolve(record)
                except Exception:  # any failure here only means "not known yet"
                    time.sleep(0.1)
                    continue
                if found is not None:
                    return found
                if record.kind != "trigger" and not self._membership.view.owns(
                    record.job, labels, program
                ):
                    return None
                try:  # certainly not created: try once more (late by now, most likely)
                    return self._claims.claim_late(record)
                except Exception:
                    pass
            time.sleep(0.1)
        return None

    def _run(self, fire: _OurFire, wait: bool, programs: ProgramLookup | None = None) -> str:
        """Start the command. With wait=False the caller's thread is free as soon as it has
        started: the run's own monitor thread records the result (a pool thread is never held
        for a command's whole run, so punctuality does not depend on how long jobs take).
        `programs`: where fires started together look their command up."""
        spec, claimed, lock, key = fire.spec, fire.claimed, fire.lock, fire.key
        env = dict(spec.env)
        env.update(
            ZKSCHED_JOB=spec.name,
            ZKSCHED_SCHEDULED=claimed.record.scheduled,
            ZKSCHED_FIRE_KEY=key,
            ZKSCHED_MEMBER_ID=self._settings.member_id,
            ZKSCHED_CLIENT_ID=self._settings.client_id,
            ZKSCHED_FENCING_TOKEN=str(claimed.fencing_token),
        )
        with self._idle:
            self._in_flight += 1
        registered = threading.Event()  # finish() may come before start() returns
        started: list[float] = []

        def finish(result: RunResult) -> None:
            registered.wait(5.0)  # bounded: never a hang, whatever thread this runs on
            t_started = started[0] if started else self._clock.now()
            try:
                self._finish(fire, t_started, result)
            finally:
                self._done_in_flight()

        self._slots.acquire()  # --concurrency: wait for a free slot (the claim is ours)
        try:
            request = RunRequest(
                job=spec.name,
                fire_key=key,
                argv=tuple(spec.command),
                env=env,
                cwd=spec.workdir,
                timeout=spec.timeout,
            )
            on_done = None if wait else finish
            if self._terminating:
                # The stop terminated the runs and so freed this slot: starting now would
                # leave a command running after the member left. Recorded as not started.
                command = self._runner.refuse(
                    request, "not started: the daemon is stopping", on_done, self._slots.release
                )
            else:
                command = self._runner.start(
                    request,
                    on_done,
                    self._slots.release,  # the moment the command has ended, not once recorded
                    programs,
                )
        except BaseException:
            self._slots.release()
            if lock is not None:
                self._leases.give_back(spec.name, lock, keep=True)
            self._done_in_flight()
            raise
        started.append(self._clock.now())
        with self._running_lock:
            self._running[key] = _Running(command, lock, key)
        if lock is not None:
            lock.on_lost(lambda: self._on_lock_lost(key))
        registered.set()
        if not wait:
            return "started"
        result = command.wait()
        finish(result)
        return result.status

    def _finish(self, fire: _OurFire, t_started: float, result: RunResult) -> None:
        spec, claimed, lock, key = fire.spec, fire.claimed, fire.lock, fire.key
        with self._running_lock:
            self._running.pop(key, None)
        if lock is not None:
            lock.on_lost(None)
        final = claimed.record.with_changes(
            state=result.status,
            started_at=_iso(result.started_at),
            finished_at=_iso(result.finished_at),
            exit_code=result.exit_code,
            error=result.error,
        )
        # one view for both questions: keep the lock, and does a new owner wait for it
        view = self._membership.view
        owned = view.owns(spec.name, spec.labels, spec.command[0])
        keep = lock is not None and owned and self._keeps_lease(spec, lock, view)
        if lock is not None and keep:
            # The command has ended: the job's next fire may go while this result is written.
            self._leases.give_back(spec.name, lock, keep=True)

        def report() -> None:
            self._prune(spec)  # after the result is written, off the completion thread
            self._report(fire, t_started, result)

        # Written with the other results ready now. A lock not worth keeping is released by
        # the writer's thread after the result (with the others of its batch): a slow
        # ZooKeeper never holds up the completion of other runs, and with it their locks.
        release = None if lock is None or keep else (spec.name, lock)
        if release is not None:
            self._leases.ending(spec.name)
        # A job that moved: its new owner finds the lock held and this run's record
        # `running` until the result is written (and skips `still-running`), so this one
        # does not wait for a burst to settle.
        moved = release is not None and not owned
        self._results.submit(claimed, final, report, release, urgent=moved)

    def _report(self, fire: _OurFire, t_started: float, result: RunResult) -> None:
        """Count and log a fire whose result is written."""
        spec, claimed, key = fire.spec, fire.claimed, fire.key
        t_due, t_claimed = fire.t_due, fire.t_claimed
        with self._running_lock:  # reports come from many threads at once
            self.stats.fired += 1
            self.stats.results[result.status] = self.stats.results.get(result.status, 0) + 1
        event = {
            "event": "fire",
            "job": spec.name,
            "fire_key": key,
            "kind": claimed.record.kind,
            "status": result.status,
            "exit_code": result.exit_code,
            "fencing_token": claimed.fencing_token,
            "scheduled_ts": t_due,
            "claimed_ts": t_claimed,
            "started_ts": t_started,
            "finished_ts": result.finished_at,
            "delay_ms": round((t_started - t_due) * 1000, 2),
        }
        log.info(
            "%s %s (exit %s, started %.0f ms after due)",
            key,
            result.status,
            result.exit_code,
            (t_started - t_due) * 1000,
            extra=event,
        )
        for observer in self.observers:
            observer(event)

    def _keeps_lease(self, spec: JobSpec, lock: JobLock, view: ClusterView) -> bool:
        """Keep the lock of a job this member still owns (in `view`) after this run: still
        good, and the job's next fire is near."""
        if self._leases.closing or lock.lost or view.session_id != lock.session_id:
            return False
        now = self._clock.now()
        try:
            upcoming = spec.schedule_obj.next_fire(datetime.fromtimestamp(now, UTC))
        except Exception:  # no future instant at all
            return False
        return upcoming.timestamp() - now <= LINGER

    def _done_in_flight(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def busy(self) -> bool:
        """A fire is being claimed or started, a command is running, or a result is still
        to be written."""
        with self._idle:
            if self._in_flight or self._firing:
                return True
        return not self._results.idle

    def _results_wait(self) -> bool:
        """Whether results should wait (read without the lock: a hint, asked often): fires
        due together are being claimed or started here, or were until a moment ago (as long
        again as that took, at most `SETTLE`), unless the member is stopping. In a cluster
        every member's burst of a common instant claims through the same ZooKeeper, and on
        a shared host starts on the same cores: a burst's result writes, lock releases and
        log lines are nobody's critical path, its claims and starts are everybody's."""
        if self._terminating or self._leases.closing:
            return False
        return self._batches > 0 or time.monotonic() < self._settled_at

    def _enter(self) -> None:
        with self._idle:
            self._firing += 1

    def _leave(self) -> None:
        with self._idle:
            self._firing -= 1

    def wait_idle(self, timeout: float) -> bool:
        """Block until every claimed fire has finished and been recorded (graceful stop)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            if not self._idle.wait_for(lambda: self._in_flight == 0, timeout):
                return False
        return self._results.drain(max(0.0, deadline - time.monotonic()))

    # -- records ----------------------------------------------------------------------------

    def _new_record(
        self,
        job: str,
        scheduled: str,
        session: int,
        state: FireState,
        kind: FireKind,
        claimed_at: str | None = None,
        **fields: Any,
    ) -> FireRecord:
        """A claim record of this member, with a fresh nonce (how a create whose reply was
        lost is recognised as ours)."""
        return FireRecord(
            job=job,
            scheduled=scheduled,
            member_id=self._settings.member_id,
            session=session,
            nonce=uuid.uuid4().hex[:16],
            state=state,
            claimed_at=self._clock.iso() if claimed_at is None else claimed_at,
            kind=kind,
            **fields,
        )

    def _scheduled_claim(
        self, spec: JobSpec, instant: datetime, session: int, claimed_at: str
    ) -> FireRecord:
        """The claim record of a scheduled fire (drafted ahead, or made at its instant)."""
        return self._new_record(
            spec.name, format_utc(instant), session, "running", "scheduled", claimed_at
        )

    def _record_skip(
        self, spec: JobSpec, scheduled: str, kind: FireKind, session: int, reason: str
    ) -> None:
        """A deliberate skip is recorded, so that catch-up does not run it later."""
        record = self._new_record(
            spec.name, scheduled, session, "skipped", kind, skip_reason=reason
        )
        try:
            if isinstance(self._claims.claim(record), Claimed):
                self._note_history(spec.name, scheduled)
        except (KazooException, KazooTimeoutError):
            pass  # the skip is still counted and logged

    def record_skip_range(self, spec: JobSpec, first: datetime, last: datetime, count: int) -> None:
        """One record for the instants a catch-up did not run: at the newest, covering back to
        the oldest (`extra.covers_from`), so the audit can tell skipped from lost. NodeExists
        means another member already recorded that instant: fine either way."""
        view = self._membership.view
        if not view.connected or view.session_id is None:
            return
        scheduled = format_utc(last)
        record = self._new_record(
            spec.name,
            scheduled,
            view.session_id,
            "skipped",
            "catchup",
            skip_reason="outside-catchup-window",
            extra={"covers_from": format_utc(first), "count": count},
        )
        try:
            if isinstance(self._claims.claim(record), Claimed):
                self._note_history(spec.name, scheduled)
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("could not record the skipped range of %s (%s)", spec.name, exc)

    def _write_result(self, claimed: Claimed, record: FireRecord) -> None:
        try:
            self._claims.complete(claimed, record)
        except Exception as exc:  # kept and retried whatever went wrong
            log.warning(
                "could not record the result of %s (%s); will retry",
                record.fire_key,
                type(exc).__name__,
            )
            self._keep_unwritten(claimed, record)

    def _keep_unwritten(self, claimed: Claimed, record: FireRecord) -> None:
        with self._running_lock:
            self._unwritten.append((claimed, record))

    def has_pending(self) -> bool:
        """Results to write again, or fires to settle, once ZooKeeper answers."""
        with self._running_lock:
            return bool(self._unwritten or self._retries)

    def _queue_retry(self, retry: _Retry) -> None:
        with self._running_lock:
            self._retries.append(retry)

    def retry_unresolved(self) -> None:
        """Settle fires that failed on the connection (called periodically while connected).

        No record: the instant is still free, fire it again. A record with our nonce: a claim
        whose command this member knows it never started, so running it now cannot run it
        twice. Someone else's record: it is theirs. Given up after the job's catch-up window.
        """
        with self._running_lock:
            pending, self._retries = self._retries, []
            pending.sort(key=lambda r: r.instant)  # a job's instants run in order
            # Still deferred until settled: later instants keep waiting behind them, also
            # those a pass running beside this one settles (a slow pass never holds up the
            # retries deferred after it began; each job's order is kept by the waiting).
            self._settling.extend(pending)
        for retry in pending:
            current: _Retry | None = None
            requeue = False
            try:
                current = self._current(retry)
                if current is not None:
                    self._settle(current)
            except Exception:  # never the rest of the pass: this one is tried again
                log.exception("%s: settling failed", fire_key(retry.spec.name, retry.instant))
                requeue = True
            with self._running_lock:
                self._settling.remove(retry)
                if requeue:
                    self._retries.append(retry)  # keeps its hold
                queued = requeue or (
                    current is not None and any(r is current for r in self._retries)
                )
            if retry.holds_back and not queued:  # settled (or deferred anew)
                self._release_hold(retry.spec.name)

    def _current(self, retry: _Retry) -> _Retry | None:
        """The retry with its job's spec as it is now (`spec_of`); None: the job is gone
        (deleted, or its record unreadable) or was changed after the instant (as catch-up,
        which never looks behind a job's last change), and so is the retry."""
        if self.spec_of is None:
            return retry
        # a claim of ours that may have landed is settled whatever the change (else its
        # record would stay `running`, abandoned); an unclaimed instant goes with the change
        spec = self.spec_of(retry.spec.name, None if retry.record else retry.instant)
        if spec is None:
            key = fire_key(retry.spec.name, retry.instant)
            log.info("%s: not retried: the job is gone, or changed after the instant", key)
            return None
        return retry if spec is retry.spec else replace(retry, spec=spec)

    def _settle(self, retry: _Retry) -> None:
        """One fire of `retry_unresolved`: run, recorded, given up or queued again."""
        spec, key = retry.spec, fire_key(retry.spec.name, retry.instant)
        if self._clock.now() - retry.instant.timestamp() > max(spec.catchup_window, 60.0):
            log.error(
                "%s: given up: not settled within max(catch-up window, 60 s) of its instant",
                key,
                extra={"event": "retry-abandoned", "fire_key": key},
            )
            return
        try:
            found = self._claims.resolve(retry.record) if retry.record else None
        except Exception:
            self._queue_retry(retry)
            return
        if isinstance(found, AlreadyClaimed):
            return
        if found is None:
            log.info("%s: retrying after a ZooKeeper failure", key)
            # no waiting on another member's lock: one pass settles many fires in a row
            self.fire(spec, retry.instant, retry.kind, retry.due_at, False, remote_wait=0.0)
            return
        self._run_late(retry, found, key)

    def _run_late(self, retry: _Retry, claimed: Claimed, key: str) -> None:
        spec = retry.spec
        lock: JobLock | None = None
        if spec.overlap == "skip":
            session = self._membership.view.session_id
            if session is None:
                self._queue_retry(retry)
                return
            attempt, lock = self._leases.take(spec.name, session)
            if attempt is LockAttempt.UNKNOWN:
                self._queue_retry(retry)
                return
            if self._another_fire_has_lease(spec.name, attempt, lock):
                self._queue_retry(retry)
                return
            if attempt is LockAttempt.HELD:
                skipped = claimed.record.with_changes(state="skipped", skip_reason="still-running")
                self._write_result(claimed, skipped)
                return
        log.info("%s: claim confirmed after a ZooKeeper failure; running it now", key)
        self._run(_OurFire(spec, claimed, lock, retry.due_at, self._clock.now()), wait=False)

    def flush_unwritten(self) -> None:
        """Retry result writes that failed (called periodically while connected)."""
        with self._running_lock:
            pending, self._unwritten = self._unwritten, []
        for claimed, record in pending:
            self._write_result(claimed, record)

    def _note_history(self, job: str, instant: str) -> None:
        with self._history_lock:
            known = self._history.get(job)
            if known is not None and (not known or known[-1] < instant):
                known.append(instant)
            elif known is not None and instant not in known:
                known.append(instant)
                known.sort()

    def _prune(self, spec: JobSpec) -> None:
        """Keep `history` records, and every record of the last PRUNE_MIN_AGE seconds."""
        with self._history_lock:
            known = self._history.get(spec.name)
        try:
            if known is None:
                known = self._claims.instants(spec.name)
                self.remember_history(spec.name, known)
            keep = max(1, spec.history)
            if len(known) <= keep + PRUNE_SLACK:
                return
            # an instant is fired up to its jitter after it: its neighbours' records stay
            age = PRUNE_MIN_AGE + spec.jitter
            young = format_utc(datetime.fromtimestamp(self._clock.now() - age, UTC))
            victims = [i for i in known[: len(known) - keep] if i < young]
            if len(victims) <= PRUNE_SLACK:
                return  # the rest of the last minute's records stay (see PRUNE_MIN_AGE)
            if not self._claims.prune(spec.name, victims):
                return  # another member pruned meanwhile: they stay known, for next time
            with self._history_lock:
                current = self._history.get(spec.name, [])
                self._history[spec.name] = [i for i in current if i not in set(victims)]
        except (KazooException, KazooTimeoutError) as exc:
            log.debug("history pruning of %s postponed: %s", spec.name, exc)

    # -- losing the session or the lock mid-run ----------------------------------------------

    def _on_session_lost(self) -> None:
        self._leases.session_lost()
        with self._running_lock:
            running = list(self._running.values())
        for item in running:  # their locks were forgotten by session_lost() above
            self._apply_loss_policy(item, "the ZooKeeper session was lost")

    def terminate_all(self, why: str) -> None:
        """Stop every running command (a stop that waited long enough); fires still waiting
        for a concurrency slot are then recorded as not started instead of starting."""
        self._terminating = True
        with self._running_lock:
            running = list(self._running.values())
        for item in running:
            item.command.terminate(why)

    def _on_lock_lost(self, key: str) -> None:
        with self._running_lock:
            item = self._running.get(key)
        if item is not None:
            self._apply_loss_policy(item, "the job's lock vanished")

    def _apply_loss_policy(self, item: _Running, why: str) -> None:
        if self._settings.on_session_loss == "terminate":
            log.warning(
                "%s: %s; terminating the command (on_session_loss = terminate)",
                item.fire_key,
                why,
                extra={"event": "terminate", "fire_key": item.fire_key},
            )
            item.command.terminate(why)
        else:
            log.warning(
                "%s: %s; the command keeps running (on_session_loss = continue)",
                item.fire_key,
                why,
                extra={"event": "continue", "fire_key": item.fire_key},
            )

    def _skip(self, job: str, reason: str, detail: str) -> str:
        self._skips.skip(job, reason, detail)
        return f"skip:{reason}"


def _iso(epoch: float) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"
    )
