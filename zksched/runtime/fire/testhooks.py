"""Fault hooks for tests of the whole daemon, off unless an environment variable names
them (read once, at start).

`ZKSCHED_TEST_DIE_AFTER_CLAIM=job1,job2`: SIGKILL this daemon as soon as a claim of each
named job has landed here, before any of their commands starts (a claim that lands first
holds its I/O thread until the others have, or 10 s): the window between claim and start
that at-most-once loses and at-least-once runs again.
"""

from __future__ import annotations

import os
import signal
import threading

_DIE_AFTER_CLAIM = frozenset(
    j for j in os.environ.get("ZKSCHED_TEST_DIE_AFTER_CLAIM", "").split(",") if j
)
_claimed: set[str] = set()
_all_claimed = threading.Condition()


def claim_landed(job: str) -> None:
    if job not in _DIE_AFTER_CLAIM:
        return
    with _all_claimed:
        _claimed.add(job)
        if _claimed >= _DIE_AFTER_CLAIM:
            os.kill(os.getpid(), signal.SIGKILL)
        _all_claimed.wait_for(lambda: _claimed >= _DIE_AFTER_CLAIM, timeout=10.0)
