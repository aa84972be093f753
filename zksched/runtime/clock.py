"""Wall-clock time for the fire path, injectable so that tests can skew a member's clock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class Clock:
    offset: float = 0.0  # seconds added to the real clock (tests: clock skew between hosts)

    def now(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        """Seconds for measuring intervals (never set back)."""
        return time.monotonic()

    def now_dt(self) -> datetime:
        return datetime.fromtimestamp(self.now(), UTC)

    def iso(self) -> str:
        """Now as `2026-01-02T02:00:00.123Z`."""
        return iso_ms(self.now())


def iso_ms(epoch: float) -> str:
    """`epoch` as `2026-01-02T02:00:00.123Z` (one reading for every part), as records say it."""
    seconds, millis = divmod(int(epoch * 1000), 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis:03d}Z"
