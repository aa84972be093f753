"""Which fire records history pruning deletes: a pure rule, shared by the daemon's pruner and
the app's coordination API. No record younger than PRUNE_MIN_AGE is deleted: with
`history = 1` a record could otherwise go the moment a newer one exists, and a member whose
clock is a few seconds behind would claim that instant afresh and run it again."""

from __future__ import annotations

from datetime import UTC, datetime

from zksched.core.fire.model import FUTURE_MARGIN
from zksched.core.firekey import format_utc

PRUNE_MIN_AGE = 60.0
PRUNE_SLACK = 5


def prune_victims(instants: list[str], keep: int, now: float, min_age: float) -> list[str]:
    """Which of a job's records (sorted instants) pruning deletes: all but the `keep`
    newest, of those older than `min_age` seconds. Records from the future are no history:
    they never take a kept record's place, and are not deleted here either. Empty unless
    more than PRUNE_SLACK would go (pruning goes in batches)."""
    victims = _prunable(instants, keep, now, min_age)
    return victims if len(victims) > PRUNE_SLACK else []


def behind_history(
    instants: list[str], instant: str, keep: int, now: float, min_age: float
) -> bool:
    """Whether a new record of `instant`, beside the records `instants` (sorted), would be
    one that pruning deletes (older than the `keep` newest and than `min_age` seconds),
    whatever the batch: a late claim of it is behind the pruning horizon, as if pruning had
    run already (coordination's claims refuse it)."""
    if instant in instants:
        return False  # claimed already: the claim itself says so
    return instant in _prunable(sorted([*instants, instant]), keep, now, min_age)


def _prunable(instants: list[str], keep: int, now: float, min_age: float) -> list[str]:
    latest = format_utc(datetime.fromtimestamp(now + FUTURE_MARGIN, UTC))
    present = [i for i in instants if i <= latest]
    young = format_utc(datetime.fromtimestamp(now - min_age, UTC))
    return [i for i in present[: max(0, len(present) - keep)] if i < young]
