"""What a fire folder's names and data mean (zksched/zk/firefolder.py), whoever wrote them."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from zksched.core.firekey import format_utc
from zksched.zk.firefolder import (
    UNREADABLE_HORIZON,
    effective_horizon,
    recorded,
    stored_horizon,
)


def utc(epoch: float) -> str:
    return format_utc(datetime.fromtimestamp(epoch, UTC))


def test_only_instants_of_the_past_can_be_records() -> None:
    now = time.time()
    names = [utc(now - 60), utc(now + 3), utc(now + 60), "zzz", "0001-01-01T00:00:00Z", "x@y"]
    assert recorded(names) == [utc(now - 60), utc(now + 3)]  # 3 s: within the clocks' margin


@pytest.mark.parametrize(
    ("raw", "version", "stored"),
    [
        (b"", 0, None),  # made, never pruned
        (b'{"pruned_through": "2026-01-01T00:00:00Z"}', 3, "2026-01-01T00:00:00Z"),
        (b"", 4, UNREADABLE_HORIZON),  # written, then blanked
        (b"garbage", 1, UNREADABLE_HORIZON),
        (b'{"pruned_through": "zzz"}', 1, UNREADABLE_HORIZON),
        (b'{"pruned_through": 5}', 1, UNREADABLE_HORIZON),
        (b'{"pruned_through": "8999-01-01T00:00:00Z"}', 1, UNREADABLE_HORIZON),
        (b"[" * 100_000 + b"]" * 100_000, 1, UNREADABLE_HORIZON),
    ],
)
def test_the_stored_horizon_is_an_instant_of_the_past_or_unreadable(
    raw: bytes, version: int, stored: str | None
) -> None:
    assert stored_horizon(raw, version) == stored


def test_an_unreadable_horizon_bounds_by_its_write_and_the_newest_record() -> None:
    written = time.time() - 3600
    records = [utc(written - 100), utc(written + 600), "zzz", utc(time.time() + 3600)]
    # pruned before the write: older than it; after it: every prune rewrote the horizon
    assert effective_horizon(UNREADABLE_HORIZON, int(written * 1000), []) == utc(written + 5)
    # the newest record (a real one) was never pruned: it bounds it too, if later
    assert effective_horizon(UNREADABLE_HORIZON, int(written * 1000), records) == utc(written + 600)
    assert effective_horizon("2026-01-01T00:00:00Z", 0, records) == "2026-01-01T00:00:00Z"
    assert effective_horizon(None, 0, records) is None
