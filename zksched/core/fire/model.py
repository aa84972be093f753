"""What goes into the fire core (events) and what comes out of it (actions).

Every value is frozen. Instants are aware UTC datetimes; times (`now`, `at`) are the
member's clock in epoch seconds, passed in by the shell with every event: the core reads
no clock of its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

FireKind = Literal["scheduled", "catchup", "trigger"]


class SkipReason(enum.Enum):
    NOT_CONNECTED = "not-connected"
    ALREADY_CLAIMED = "already-claimed"
    STILL_RUNNING = "still-running"
    PAUSED = "paused"
    CLAIM_ERROR = "claim-error"
    OUTSIDE_CATCHUP_WINDOW = "outside-catchup-window"


class ClaimOutcome(enum.Enum):
    CREATED = "created"  # ours (made now, or found with our nonce): the fencing token comes too
    TAKEN = "taken"  # another record is there (another member's, or behind the horizon)
    ABSENT = "absent"  # (resolving only) certainly not created
    UNKNOWN = "unknown"  # the reply was lost: it may have landed


class LeaseOutcome(enum.Enum):
    TAKEN = "taken"
    BUSY = "busy"  # another holder, after waiting as long as the take allowed
    UNKNOWN = "unknown"  # the attempt failed on the connection


# -- events: job-level ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    """A timer the machine asked for came due (extra ticks are harmless)."""


@dataclass(frozen=True, slots=True)
class HistoryRead:
    """The job's fire record instants (the folder's children), and its pruning horizon.
    `ok` False: the read failed; planning is tried again."""

    instants: tuple[datetime, ...] = ()
    horizon: datetime | None = None
    ok: bool = True
    # asked for (`ReadHistory.orphans_since`): the instants whose record is `running` while
    # its claimer's session is gone (its live marker went with it), with the record's attempt
    orphans: tuple[tuple[datetime, int], ...] = ()


@dataclass(frozen=True, slots=True)
class RangesRead:
    """The skip ranges [covers_from, scheduled] of the records asked for by `ReadRanges`."""

    ranges: tuple[tuple[datetime, datetime], ...] = ()
    ok: bool = True


@dataclass(frozen=True, slots=True)
class LeaseAnswered:
    """The answer to the `TakeLease` with the same `take` (an answer may arrive after the
    core gave that take up and sent another: only the id tells them apart)."""

    outcome: LeaseOutcome
    take: int
    holder: str | None = None  # who holds it, when busy (for the log)
    # with BUSY: the job's newest record says a run is going (else the holder lingers
    # between runs, or died and its session has not expired yet)
    running: bool = True


@dataclass(frozen=True, slots=True)
class OrphansFound:
    """The answer to `FindOrphans`: (instant, its record's attempt) of each orphan."""

    orphans: tuple[tuple[datetime, int], ...] = ()
    ok: bool = True


@dataclass(frozen=True, slots=True)
class LeaseGone:
    """The lock node that `take` got vanished while we held it."""

    take: int


@dataclass(frozen=True, slots=True)
class ClaimAnswered:
    instant: datetime
    outcome: ClaimOutcome
    token: int | None = None  # with CREATED
    holder: str | None = None  # with TAKEN: whose record it is, if known
    passed: bool = False  # with TAKEN: a late claim behind a newer record (none at its instant)


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """The answer to `Withdraw`. `done`: the record is gone (deleted now, or before), or it
    is no longer the claim we made; False: the reply was lost (tried again when connected)."""

    instant: datetime
    done: bool = True


@dataclass(frozen=True, slots=True)
class Started:
    instant: datetime


@dataclass(frozen=True, slots=True)
class StartFailed:
    instant: datetime
    error: str


@dataclass(frozen=True, slots=True)
class Exited:
    instant: datetime
    status: str  # ok | failed | timeout | terminated | error


@dataclass(frozen=True, slots=True)
class ResultWritten:
    instant: datetime


@dataclass(frozen=True, slots=True)
class Triggered:
    """A `jobs trigger` this member has taken (its node deleted by us): run once, now."""

    trigger_id: str


JobEvent = (
    Tick
    | HistoryRead
    | RangesRead
    | LeaseAnswered
    | OrphansFound
    | LeaseGone
    | ClaimAnswered
    | Withdrawn
    | Started
    | StartFailed
    | Exited
    | ResultWritten
    | Triggered
)


# -- actions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetTimer:
    job: str
    at: float


@dataclass(frozen=True, slots=True)
class ReadHistory:
    job: str
    # delivery = at-least-once: report the orphaned claims from this instant on
    orphans_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class FindOrphans:
    """List the job's orphaned claims (at-least-once) from `since` on."""

    job: str
    since: datetime


@dataclass(frozen=True, slots=True)
class ReadRanges:
    job: str
    instants: tuple[datetime, ...]  # the records whose skip ranges may cover holes


@dataclass(frozen=True, slots=True)
class TakeLease:
    job: str
    wait: float  # how long the shell may wait for another holder to let go (0: not at all)
    take: int  # unique on this member: echoed by the answer, named by `GiveBackLease`


@dataclass(frozen=True, slots=True)
class GiveBackLease:
    """Give up exactly the lock node that `take` got (never another take's)."""

    job: str
    take: int


@dataclass(frozen=True, slots=True)
class Claim:
    """Create the fire's record (state running) with a fresh nonce. `late`: check the
    job's pruning horizon first (a plain create could bring back a pruned instant)."""

    job: str
    instant: datetime
    kind: FireKind
    late: bool
    # > 1: claim again an orphaned record (at-least-once) whose last attempt was attempt - 1
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class Resolve:
    """Find out whether the fire's claim (whose reply was lost) landed, and whose it is."""

    job: str
    instant: datetime


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Delete the fire's record if it is still exactly the claim we made (never started,
    never completed): contact was lost between the claim and its start. The instant is then
    missed like any other, and the catch-up policy runs it (a fresh claim, a larger fencing
    token) or records it."""

    job: str
    instant: datetime


@dataclass(frozen=True, slots=True)
class Start:
    job: str
    instant: datetime
    kind: FireKind
    token: int
    attempt: int = 1  # > 1: a retry of a failed run (ZKSCHED_ATTEMPT)


@dataclass(frozen=True, slots=True)
class RecordAttempt:
    """Attempt `attempt` of the fire ended `status` and the fire is run again at `retry_at`
    (the member's clock): note that attempt in the fire's record, which stays `running`."""

    job: str
    instant: datetime
    attempt: int
    status: str
    retry_at: float


@dataclass(frozen=True, slots=True)
class Terminate:
    job: str
    instant: datetime
    why: str


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Complete the fire's record: a command's status, or `skipped` with a reason for a
    claim of ours that was not run."""

    job: str
    instant: datetime
    status: str
    reason: SkipReason | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RecordSkip:
    """Create a `skipped` record at `instant` (covering back to `covers_from`, `count`
    instants), so that no later catch-up runs what was deliberately not run. Its answer is
    not awaited: NodeExists means another member recorded that instant, fine either way."""

    job: str
    instant: datetime
    kind: FireKind
    reason: SkipReason
    covers_from: datetime | None = None
    count: int = 1


@dataclass(frozen=True, slots=True)
class Skip:
    """Count and log a due fire that is not run (`count` instants at once)."""

    job: str
    instant: datetime
    reason: SkipReason
    detail: str = ""
    count: int = 1


@dataclass(frozen=True, slots=True)
class ReturnTrigger:
    """A trigger this member took but can no longer run (the job moved): leave it again for
    the job's new owner."""

    job: str
    trigger_id: str


@dataclass(frozen=True, slots=True)
class Warn:
    """Something an operator should know (a record from the future, a fire given up)."""

    job: str
    event: str
    text: str


Action = (
    SetTimer
    | ReadHistory
    | FindOrphans
    | ReadRanges
    | TakeLease
    | GiveBackLease
    | Claim
    | Resolve
    | Withdraw
    | Start
    | RecordAttempt
    | Terminate
    | WriteResult
    | RecordSkip
    | Skip
    | ReturnTrigger
    | Warn
)


# -- settings ---------------------------------------------------------------------------------

# Records named past now + this (seconds) are from the future: fires are claimed at their
# instant, so only clocks' skew puts a real one ahead. Ignored, and reported by `audit`.
FUTURE_MARGIN = 5.0


@dataclass(frozen=True, slots=True)
class FireTunables:
    """Every timing the decisions use, in one place (seconds)."""

    lease_lead: float = 10.0  # take the lease this long before a fire
    linger: float = 60.0  # keep the lease after a run if the next fire is this close
    lease_wait_max: float = 30.0  # wait at most this long for another holder to let go
    late_claim_age: float = 1.0  # a claim this late checks the pruning horizon
    retry_interval: float = 0.5  # a failed read, lease take or unknown claim is tried again
    future_margin: float = FUTURE_MARGIN
    on_session_loss: Literal["terminate", "continue"] = "terminate"
    orphan_interval: float = 10.0  # at-least-once: look for orphaned claims this often
    # a read the shell never answered (it answers every one, a failure too: so only a bug
    # in the shell) is asked again after this, rather than leave the job waiting for ever;
    # long, because a read waits in the shell's queue behind a takeover's other reads
    answer_deadline: float = 600.0
    # an owned job with nothing to catch up whose next fire is further away than this keeps
    # no machine until then (a member owning a million daily jobs holds machines only for
    # the few due soon); 0: every owned job has its machine. Above lease_lead, so that the
    # lease is still taken ahead.
    dormant_horizon: float = 300.0

    def __post_init__(self) -> None:
        if 0 < self.dormant_horizon <= self.lease_lead:
            raise ValueError(
                f"dormant_horizon ({self.dormant_horizon}) must be above lease_lead "
                f"({self.lease_lead}), or 0"
            )
