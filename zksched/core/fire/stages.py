"""The stages of one fire and of a job's lease, and the only moves between them.

A fire is one (job, instant) on one member, from the moment it is due to its recorded
result. Each stage says what the fire waits for:

    LEASING    the job's lease (overlap = skip), taken for this fire or ahead of it
    CLAIMING   the answer to its claim (the create of its fire record)
    UNKNOWN    nothing: the claim's reply was lost; it is resolved once connected
    RESOLVING  the answer to "did that claim land, and is it ours?"
    PARKED     the connection: a claim of ours that came back after this member lost
               contact (it was sent before); it is withdrawn once connected, never started
    WITHDRAWING  the answer to the delete of that claim's record (then the instant is
               missed like any other, and the catch-up policy decides it)
    STARTING   its command's start
    RUNNING    its command's exit
    BACKING_OFF  its retry time: the command failed and the job retries (`retries`)
    WRITING    its result's write (the shell retries until it lands)
    DONE       nothing more: the fire is forgotten

A move not in TRANSITIONS is a bug in the machine and raises `IllegalTransition`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class IllegalTransition(RuntimeError):
    """The fire machine tried a move that its table does not allow."""


class FireStage(enum.Enum):
    LEASING = "leasing"
    CLAIMING = "claiming"
    UNKNOWN = "unknown"
    RESOLVING = "resolving"
    PARKED = "parked"
    WITHDRAWING = "withdrawing"
    STARTING = "starting"
    RUNNING = "running"
    BACKING_OFF = "backing-off"
    WRITING = "writing"
    DONE = "done"


class Step(enum.Enum):
    """What happened to a fire: the input of its transition table."""

    LEASE_TAKEN = "lease-taken"  # the lease is ours: claim
    CLAIM_SENT = "claim-sent"  # (re)claiming: its create is on its way
    CREATED = "created"  # the claim is ours, with its fencing token: start
    PARKED = "parked"  # the claim is ours, but contact was lost since it was sent
    UNKNOWN = "unknown"  # the claim's (or the withdrawal's) reply was lost
    RESOLVE_SENT = "resolve-sent"
    WITHDRAW_SENT = "withdraw-sent"
    WITHDRAWN = "withdrawn"  # the record of our claim is gone: the instant is missed
    START_FAILED = "start-failed"
    STARTED = "started"
    EXITED = "exited"
    RETRY_LATER = "retry-later"  # the command failed; it is run again after a pause
    RETRIED = "retried"  # the pause is over: the next attempt's command starts
    GAVE_UP = "gave-up"  # no more attempts (the job moved, the session went): record the last
    SETTLED = "settled"  # a claim of ours that will not run: its result is written as a skip
    DROPPED = "dropped"  # nothing of it is in ZooKeeper, or not ours: forgotten (skip logged)
    WRITTEN = "written"


_S, _T = FireStage, Step
TRANSITIONS: Mapping[tuple[FireStage, Step], FireStage] = MappingProxyType(
    {
        (_S.LEASING, _T.LEASE_TAKEN): _S.CLAIMING,
        (_S.LEASING, _T.DROPPED): _S.DONE,
        (_S.CLAIMING, _T.CREATED): _S.STARTING,
        (_S.CLAIMING, _T.PARKED): _S.PARKED,
        (_S.CLAIMING, _T.UNKNOWN): _S.UNKNOWN,
        (_S.CLAIMING, _T.DROPPED): _S.DONE,
        (_S.CLAIMING, _T.SETTLED): _S.WRITING,
        (_S.UNKNOWN, _T.RESOLVE_SENT): _S.RESOLVING,
        (_S.UNKNOWN, _T.DROPPED): _S.DONE,
        (_S.RESOLVING, _T.CREATED): _S.STARTING,
        (_S.RESOLVING, _T.PARKED): _S.PARKED,
        (_S.RESOLVING, _T.SETTLED): _S.WRITING,
        (_S.RESOLVING, _T.UNKNOWN): _S.UNKNOWN,
        (_S.RESOLVING, _T.CLAIM_SENT): _S.CLAIMING,
        (_S.RESOLVING, _T.DROPPED): _S.DONE,
        (_S.PARKED, _T.WITHDRAW_SENT): _S.WITHDRAWING,
        (_S.PARKED, _T.SETTLED): _S.WRITING,
        (_S.WITHDRAWING, _T.WITHDRAWN): _S.DONE,
        (_S.WITHDRAWING, _T.UNKNOWN): _S.PARKED,
        (_S.STARTING, _T.STARTED): _S.RUNNING,
        (_S.STARTING, _T.START_FAILED): _S.WRITING,
        (_S.RUNNING, _T.EXITED): _S.WRITING,
        (_S.RUNNING, _T.RETRY_LATER): _S.BACKING_OFF,
        (_S.BACKING_OFF, _T.RETRIED): _S.STARTING,
        (_S.BACKING_OFF, _T.GAVE_UP): _S.WRITING,
        (_S.WRITING, _T.WRITTEN): _S.DONE,
    }
)

# Stages in which the fire holds its job: with overlap = skip, no other instant of the job
# may start meanwhile (a claim in flight becomes a run the moment it is answered, a failed
# run is retried).
HOLDS_JOB = frozenset(
    {FireStage.CLAIMING, FireStage.STARTING, FireStage.RUNNING, FireStage.BACKING_OFF}
)
# Stages before any command of the fire could have started: an instant in one of them when
# the job stops being active here is looked at again by the next catch-up.
BEFORE_START = frozenset(
    {
        FireStage.LEASING,
        FireStage.CLAIMING,
        FireStage.UNKNOWN,
        FireStage.RESOLVING,
        FireStage.PARKED,
        FireStage.WITHDRAWING,
    }
)
# Stages in which a command of the fire may be running.
COMMAND_UP = frozenset({FireStage.STARTING, FireStage.RUNNING})


def next_stage(stage: FireStage, step: Step) -> FireStage:
    try:
        return TRANSITIONS[(stage, step)]
    except KeyError:
        raise IllegalTransition(f"a fire in {stage.value} cannot take {step.value}") from None


class JobPhase(enum.Enum):
    """Where a job stands on this member (each of its fires has a stage of its own)."""

    INACTIVE = "inactive"  # not ours, or not connected: nothing new is claimed
    PLANNING = "planning"  # ours: its history is read to plan the catch-up
    ACTIVE = "active"  # ours: its instants are claimed as they come due
    DELETED = "deleted"  # gone from the job table: fires in flight end, nothing new


# Every phase change the machine makes; anything else raises. Deactivation goes through
# INACTIVE (deleting does too), and a planning given up or a lease gap plans again from it.
PHASE_MOVES: frozenset[tuple[JobPhase, JobPhase]] = frozenset(
    {
        (JobPhase.INACTIVE, JobPhase.PLANNING),  # ours and connected: read the history
        (JobPhase.INACTIVE, JobPhase.ACTIVE),  # ... or nothing to catch up
        (JobPhase.INACTIVE, JobPhase.DELETED),
        (JobPhase.PLANNING, JobPhase.ACTIVE),  # the catch-up is planned
        (JobPhase.PLANNING, JobPhase.INACTIVE),  # not ours any more, or plan again
        (JobPhase.ACTIVE, JobPhase.INACTIVE),  # not ours any more, or a gap to plan
    }
)


def check_phase_move(old: JobPhase, new: JobPhase) -> JobPhase:
    if old is not new and (old, new) not in PHASE_MOVES:
        raise IllegalTransition(f"a job cannot go from {old.value} to {new.value}")
    return new


class LeaseStage(enum.Enum):
    """The job's lease (its kazoo Lock) as this member knows it."""

    FREE = "free"  # not ours (a give-back may still be on its way in the shell)
    TAKING = "taking"  # a take is on its way
    HELD = "held"  # ours, in the current session


LEASE_MOVES: frozenset[tuple[LeaseStage, LeaseStage]] = frozenset(
    {
        (LeaseStage.FREE, LeaseStage.TAKING),
        (LeaseStage.TAKING, LeaseStage.HELD),
        (LeaseStage.TAKING, LeaseStage.FREE),  # busy, unknown, or the session went
        (LeaseStage.HELD, LeaseStage.FREE),  # given back, lost, or the session went
    }
)


def check_lease_move(old: LeaseStage, new: LeaseStage) -> LeaseStage:
    if old is not new and (old, new) not in LEASE_MOVES:
        raise IllegalTransition(f"a lease cannot go from {old.value} to {new.value}")
    return new
