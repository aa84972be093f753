"""What a job's fire folder says: which of its children can be records, and up to which
instant pruning may have deleted records (the folder's data, `{"pruned_through": <instant>}`).

Anything in ZooKeeper may be somebody else's doing: a name that is no instant of the past is
no record, and a horizon that is no instant of the past is read as the most that pruning can
have deleted, never as "everything" (which refused every late claim of the job for good).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from zksched.core.fire.model import FUTURE_MARGIN
from zksched.core.firekey import format_utc, is_instant
from zksched.core.znodedata import load_object

UNREADABLE_HORIZON = "~"  # a stored value that is no horizon (sorts after every instant)


def recorded(children: Iterable[str]) -> list[str]:
    """The children of a fire folder that can be records: records are named by past
    instants, so a name that is none, or one from the future, is somebody else's doing (it
    covers nothing, and is no job's last result)."""
    latest = format_utc(datetime.now(UTC) + timedelta(seconds=FUTURE_MARGIN))
    return [c for c in children if c <= latest and is_instant(c)]


def stored_horizon(raw: bytes, version: int) -> str | None:
    """The horizon the folder's data holds: None when nothing was ever pruned (no data, never
    written), UNREADABLE_HORIZON when its data is no instant of the past."""
    if not raw:
        return None if version == 0 else UNREADABLE_HORIZON  # blanked by somebody
    try:
        value = load_object(raw, "pruning horizon").get("pruned_through")
    except ValueError:
        return UNREADABLE_HORIZON
    if not isinstance(value, str) or recorded([value]) != [value]:
        return UNREADABLE_HORIZON
    return value


def effective_horizon(stored: str | None, written_ms: int, records: Iterable[str]) -> str | None:
    """The instant up to which pruning may have deleted records, given the stored horizon,
    when the folder's data was last written (`written_ms`, the server's mtime) and records
    the folder holds.

    An unreadable value was written by somebody else at `written_ms`. Records pruned before
    that were older than it (pruning deletes old records only), and every prune since
    rewrote the horizon before deleting anything; the newest record here was never pruned.
    So nothing after the later of the two (plus the clocks' margin) was pruned."""
    if stored != UNREADABLE_HORIZON:
        return stored
    written = datetime.fromtimestamp(written_ms / 1000 + FUTURE_MARGIN, UTC)
    return max([format_utc(written), *recorded(records)])
