"""The fire path's wall clock (zksched/runtime/clock.py)."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st

from zksched.runtime.clock import Clock


@given(st.floats(min_value=0, max_value=4_000_000_000, allow_nan=False))
def test_clock_iso_reads_the_clock_once(now: float) -> None:
    class Fixed(Clock):
        def now(self) -> float:
            return now

    text = Fixed().iso()
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    assert parsed == int(now * 1000) / 1000  # milliseconds, truncated, never a second off
