"""Where the simulated members' fire records, locks and live markers live in the ZooKeeper
model, and what the checker reads of a record.

The records are the daemon's own (`FireRecord` JSON, written by the production shell through
the simulator's stores); the layout is the simulator's, flatter than the daemon's (no client
root, no hash folders): `/fires/<job>/<instant>`, `/locks/<job>/`, `/live/<job>/`, `/fence`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from zksched.core.fire.model import FUTURE_MARGIN
from zksched.core.firekey import format_utc
from zksched.core.firerecord import FireRecord

FENCE = "/fence"


def fires_of(job: str) -> str:
    return f"/fires/{job}"


def record_at(job: str, instant: str) -> str:
    return f"/fires/{job}/{instant}"


def record_path(job: str, instant: datetime) -> str:
    return record_at(job, format_utc(instant))


def recorded(children: list[str], now: float) -> list[str]:
    """The children of a fire folder that can be records, as zk/firefolder.py's `recorded`
    says, on the member's clock `now` (the daemon's reads the host's): none from the future.
    Every name in the simulator's fire folders is an instant."""
    latest = format_utc(datetime.fromtimestamp(now + FUTURE_MARGIN, UTC))
    return [c for c in children if c <= latest]


def live_of(job: str) -> str:
    return f"/live/{job}"


def locks_of(job: str) -> str:
    return f"/locks/{job}"


def decode(data: bytes) -> list[str]:
    """What the checker reads of a record: state, member, session, nonce, kind, skip reason,
    the start of the range a skip covers, its count, and the attempt."""
    record = FireRecord.from_json(data)
    extra = record.extra
    return [
        record.state,
        record.member_id,
        str(record.session),
        record.nonce,
        record.kind,
        record.skip_reason or "",
        str(extra.get("covers_from", "")),
        str(extra.get("count", "")),
        str(record.attempt or ""),
    ]
