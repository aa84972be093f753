"""When a failed instant is run again: exponential backoff, capped, with jitter.

Pure: the fire core asks for the pause after a failed attempt. The jitter is fixed by the
fire key and the attempt (the same on every host, and in the simulator), and spreads out
the retries of many jobs that failed together (a database down for all of them).
"""

from __future__ import annotations

from zksched.core.firekey import jitter_of

MAX_BACKOFF = 3600.0  # a pause never grows past an hour (or the job's own backoff, if longer)
JITTER = 0.2  # each pause is its nominal length x [1 - JITTER, 1 + JITTER)
RETRYABLE = frozenset({"failed", "timeout"})  # what a retry is for: not terminated, not error


def retry_delay(backoff: float, failed_attempt: int, key: str) -> float:
    """The pause after attempt `failed_attempt` (1: the first run) of fire `key` failed:
    `backoff` x 2^(failed_attempt - 1), capped, with jitter."""
    if failed_attempt < 1:
        raise ValueError(f"attempts count from 1, got {failed_attempt}")
    nominal = min(backoff * 2.0 ** min(failed_attempt - 1, 60), max(backoff, MAX_BACKOFF))
    factor = 1.0 - JITTER + jitter_of(f"{key}#{failed_attempt}", 2 * JITTER)
    return nominal * factor
