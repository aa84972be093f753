"""The coordination API for apps that keep their own timer: claims of
(name, instant) with the daemon's fire records, named locks, and the leader election.

`Coordinator.claim` makes the same per-fire record as the daemon's fire path
(runtime/fire/zk_actions.py): a FireRecord created once at `fires/<bb>/<name>/<UTC instant>`, whose
creation zxid is the fencing token. `zksched jobs history` and `zksched audit` read it like
any fire's; `finish` completes it the way the daemon's ResultWriter does (one unconditional
write of the final record).

Invariants:
- Exactly one caller across the cluster gets a claim: the create is the gate. A create whose
  reply was lost is resolved by the record's nonce (`FireClaims.resolve`): ours, someone
  else's, or absent (then created again, same nonce). A claim that cannot be decided in time
  returns None, and the record, if it landed, is settled in the background: completed as
  `skipped` (`claim-error`), so no record of ours stays `running` with nobody running it.
- Claims go through `FireClaims.claim_late`: an instant at or behind the name's pruning
  horizon is refused (its record may have been pruned after it ran: a plain create would
  run it again). Apps' timers can be late by any amount, unlike the daemon's on-time fires.
- An instant whose record pruning would delete at once (older than the name's newest
  `history` records and than PRUNE_MIN_AGE) is refused too, before anything is created:
  it is behind the horizon that pruning, which goes in batches, has not reached yet; a
  claim granted there would be pruned, and the same instant refused afterwards.
- The fire folder stays bounded: after a won claim, records beyond the newest `history`
  (and older than PRUNE_MIN_AGE, as the daemon's pruner: a member whose clock is behind must
  still find a recent record) are pruned, in batches of PRUNE_SLACK.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from zksched.core.firekey import fire_key, format_utc
from zksched.core.firerecord import FireRecord
from zksched.core.names import name_problem
from zksched.core.pruning import PRUNE_MIN_AGE, behind_history, prune_victims
from zksched.runtime.clock import Clock
from zksched.zk.applocks import AppLock, LostCallback
from zksched.zk.claims import AlreadyClaimed, ClaimConflict, Claimed, FireClaims
from zksched.zk.election import LeaderElection
from zksched.zk.paths import ClusterPaths

log = logging.getLogger("zksched.coordination")

ClaimStatus = Literal["ok", "failed", "error"]
STATUSES: tuple[str, ...] = ("ok", "failed", "error")
MAX_ERROR_CHARS = 2000  # a record stays small; the app's log has the rest
SETTLE_STEP = 0.5  # seconds between the background settler's rounds
ZK_ERRORS = (KazooException, KazooTimeoutError)


@dataclass(frozen=True)
class AppClaim:
    """A won claim: run the work once, then `Coordinator.finish(claim, status)`."""

    name: str
    scheduled: datetime  # UTC, whole seconds
    key: str  # `name@2026-01-02T02:00:00Z`, the daemon's fire key
    fencing_token: int  # the claim's zxid: grows with every claim of the name
    member_id: str
    _claimed: Claimed = field(repr=False, compare=False)


def claim_instant(instant: datetime) -> datetime:
    """`instant` as a claim's UTC instant, to the second. Naive datetimes are refused: the
    same wall-clock time means different instants on hosts in different zones. Sub-seconds
    are dropped because fire keys and record names are to the second: two members whose
    timers fire a few milliseconds apart must name the same instant, or both would win."""
    if not isinstance(instant, datetime):
        raise ValueError(f"a claim's instant must be a datetime, not {type(instant).__name__}")
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(
            f"a claim's instant must be time-zone aware (e.g. datetime.now(UTC)), "
            f"got naive {instant.isoformat()}"
        )
    return instant.astimezone(UTC).replace(microsecond=0)


def finished_record(record: FireRecord, status: str, error: str | None, now: str) -> FireRecord:
    """The final record of an app's claim. The app starts its work when it gets the claim,
    so the claim's time is the start's."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    if error is not None and len(error) > MAX_ERROR_CHARS:
        error = error[: MAX_ERROR_CHARS - 3] + "..."
    return record.with_changes(
        state=status, started_at=record.claimed_at, finished_at=now, error=error
    )


class Coordinator:
    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        member_id: str,
        call_timeout: float = 3.0,
        history: int = 20,
        clock: Clock | None = None,
        history_of: Callable[[str], int | None] | None = None,
    ) -> None:
        """`history`: records kept per claimed name; `history_of(name)`: the job table's
        `history` for a name that is a job there (None: not a job), which then wins, so
        that claims never cut a job's history short."""
        if history < 1:
            raise ValueError(f"history must be at least 1, not {history}")
        self._history_of = history_of
        self._client = client
        self._paths = paths
        self.member_id = member_id
        self._timeout = call_timeout
        self._history = history
        self._clock = clock or Clock()
        self.claims = FireClaims(client, paths, call_timeout)
        self._mutex = threading.Lock()
        self._election: LeaderElection | None = None
        # records whose fate is not known yet (a lost reply never resolved), and results
        # not written yet: the settler thread finishes both once ZooKeeper answers
        self._unsettled: list[FireRecord] = []
        self._unwritten: list[tuple[Claimed, FireRecord]] = []
        self._settler: threading.Thread | None = None
        self._closed = threading.Event()

    # -- claims ---------------------------------------------------------------------------

    def claim(self, name: str, instant: datetime) -> AppClaim | None:
        """Claim (name, instant) for this member: an AppClaim for exactly one caller in the
        cluster, None for everyone else (taken already, behind the pruning horizon, or not
        decided: logged). ValueError for a bad name or a naive instant."""
        problem = name_problem(name, "claim name")
        if problem is not None:
            raise ValueError(problem)
        when = claim_instant(instant)
        key = fire_key(name, when)
        if self._client.state != KazooState.CONNECTED or not self._client.client_id:
            log.info("not claiming %s: not connected to ZooKeeper", key)
            return None
        try:
            known = self.claims.instants(name)
        except ZK_ERRORS as exc:
            log.info("not claiming %s: ZooKeeper did not answer (%s)", key, type(exc).__name__)
            return None
        keep = self._keep(name)
        if behind_history(known, format_utc(when), keep, self._clock.now(), PRUNE_MIN_AGE):
            log.info(
                "not claiming %s: behind the pruning horizon of %s (older than its newest %d "
                "records: its record would be pruned at once)",
                key,
                name,
                keep,
            )
            return None
        record = FireRecord(
            job=name,
            scheduled=format_utc(when),
            member_id=self.member_id,
            session=self._client.client_id[0],
            nonce=uuid.uuid4().hex[:16],
            state="running",
            claimed_at=self._clock.iso(),
        )
        found: Claimed | AlreadyClaimed | None
        try:
            found = self._create(record)
        except ClaimConflict as exc:
            log.warning("claim of %s not made: %s", key, exc)
            return None
        except ZK_ERRORS as exc:
            found = self._resolve(record)
            if found is None:
                log.warning(
                    "claim of %s undecided (%s): not run here; settled once ZooKeeper answers",
                    key,
                    type(exc).__name__,
                )
                self._later(unsettled=record)
                return None
        if isinstance(found, AlreadyClaimed):
            return None
        self._prune(name, sorted({*known, format_utc(when)}), keep)
        return AppClaim(name, when, key, found.fencing_token, self.member_id, found)

    def _create(self, record: FireRecord) -> Claimed | AlreadyClaimed:
        self.claims.ensure_folder(record.job)
        return self.claims.claim_late(record)

    def _resolve(self, record: FireRecord) -> Claimed | AlreadyClaimed | None:
        """What became of a create whose reply was lost, within two call timeouts (waiting
        for the connection to come back); None when it cannot be told in time."""
        deadline = time.monotonic() + 2 * self._timeout
        while time.monotonic() < deadline:
            if self._client.state == KazooState.CONNECTED:
                try:
                    found = self.claims.resolve(record)
                    # absent: it never applied (the read went after it): create it again
                    return found if found is not None else self._create(record)
                except ClaimConflict:
                    return AlreadyClaimed(None)  # nothing of ours was created
                except ZK_ERRORS:
                    pass
            time.sleep(0.1)
        return None

    def finish(self, claim: AppClaim, status: ClaimStatus, error: str | None = None) -> bool:
        """Write the claim's result (`ok`, `failed` or `error`, with an optional error
        text) into its fire record. True: written; False: ZooKeeper did not answer, and it
        is written in the background once it does (or the record is gone: logged)."""
        record = finished_record(claim._claimed.record, status, error, self._clock.iso())
        try:
            if not self.claims.complete(claim._claimed, record):
                log.warning("the fire record of %s is gone (deleted?); result not kept", claim.key)
                return False
        except ZK_ERRORS as exc:
            log.warning("result of %s not written yet (%s)", claim.key, type(exc).__name__)
            self._later(unwritten=(claim._claimed, record))
            return False
        return True

    def _keep(self, name: str) -> int:
        """How many records of `name` are kept: the job's `history` when it is a job."""
        keep = self._history
        if self._history_of is not None:
            keep = self._history_of(name) or keep
        return keep

    def _prune(self, name: str, instants: list[str], keep: int) -> None:
        """Keep `keep` records (and every record of the last PRUNE_MIN_AGE seconds), of
        `instants` as listed at the claim (records others made since are pruned by them)."""
        try:
            victims = prune_victims(instants, keep, self._clock.now(), PRUNE_MIN_AGE)
            if victims:
                self.claims.prune(name, victims)
        except ZK_ERRORS as exc:
            log.debug("pruning of %s postponed (%s)", name, type(exc).__name__)

    # -- the background settler --------------------------------------------------------------

    def _later(
        self,
        unsettled: FireRecord | None = None,
        unwritten: tuple[Claimed, FireRecord] | None = None,
    ) -> None:
        with self._mutex:
            if unsettled is not None:
                self._unsettled.append(unsettled)
            if unwritten is not None:
                self._unwritten.append(unwritten)
            if self._settler is None or not self._settler.is_alive():
                self._settler = threading.Thread(
                    target=self._settle_loop, name="zksched-claim-settle", daemon=True
                )
                self._settler.start()

    @property
    def pending(self) -> int:
        """Claims not settled and results not written yet (the background settler's work)."""
        with self._mutex:
            return len(self._unsettled) + len(self._unwritten)

    def close(self) -> None:
        """The member is leaving: the settler stops (a claim still unsettled then stays
        `running` under a session that ends: `abandoned`, never run)."""
        self._closed.set()

    def _settle_loop(self) -> None:
        while not self._closed.is_set():
            # work on copies; what is done leaves the lists afterwards, so that `pending`
            # counts a record until it is settled
            with self._mutex:
                if not self._unsettled and not self._unwritten:
                    self._settler = None
                    return
                unsettled, unwritten = list(self._unsettled), list(self._unwritten)
            if self._client.state == KazooState.CONNECTED:
                settled = [r for r in unsettled if self._settle(r)]
                written = [w for w in unwritten if self._write(*w)]
                with self._mutex:
                    self._unsettled = [r for r in self._unsettled if r not in settled]
                    self._unwritten = [w for w in self._unwritten if w not in written]
            self._closed.wait(SETTLE_STEP)
        with self._mutex:
            self._settler = None

    def _settle(self, record: FireRecord) -> bool:
        """Close an undecided claim: if it landed, it is ours and nobody runs it; it is
        completed as skipped (claim-error), so history says what happened. True: done."""
        try:
            found = self.claims.resolve(record)
            if isinstance(found, Claimed):
                skipped = found.record.with_changes(
                    state="skipped",
                    skip_reason="claim-error",
                    finished_at=self._clock.iso(),
                    error="the claim's outcome was not known in time; not run",
                )
                if self.claims.complete(found, skipped):
                    log.warning("claim of %s landed late; recorded as skipped", record.fire_key)
        except NoNodeError:
            return True
        except ZK_ERRORS:
            return False
        return True

    def _write(self, claimed: Claimed, record: FireRecord) -> bool:
        try:
            if not self.claims.complete(claimed, record):
                log.warning("the fire record of %s is gone; result not kept", record.fire_key)
        except ZK_ERRORS:
            return False
        return True

    # -- locks and the election ---------------------------------------------------------------

    def lock(self, name: str, on_lost: LostCallback | None = None) -> AppLock:
        """A new handle on the app lock `name` (one per holder: handles are not re-entrant)."""
        return AppLock(self._client, self._paths, name, self.member_id, self._timeout, on_lost)

    def leader_election(self) -> LeaderElection:
        """The cluster's election, as this member's candidate (the same object every time;
        not started: call `start()`)."""
        with self._mutex:
            if self._election is None:
                self._election = LeaderElection(
                    self._client, self._paths, self.member_id, self._timeout
                )
            return self._election
