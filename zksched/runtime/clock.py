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

    def now_dt(self) -> datetime:
        return datetime.fromtimestamp(self.now(), UTC)

    def iso(self) -> str:
        return (
            self.now_dt().strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(self.now() * 1000) % 1000:03d}Z"
        )
