"""`zksched` with one fault for tests of the whole daemon: SIGKILL as soon as a claim of
each named job has landed, before any of their commands starts.

    python -m tools.die_after_claim JOB[,JOB...] -- <zksched arguments>

The window between a claim and its start is the one at-most-once loses and at-least-once
runs again (integration/test_delivery.py). The hook wraps the production `ZkActions` from
outside, in this test entry point only: the installed package carries no fault hooks.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import datetime

from zksched.cli.main import main
from zksched.runtime.fire.zk_actions import ZkActions
from zksched.zk.claims import Claimed

# a claim that lands first holds its I/O thread until the others have, or this long (on a
# loaded machine the second claim has come more than 10 s after the first)
WAIT_FOR_THE_OTHERS = 30.0


def install(jobs: frozenset[str]) -> None:
    claimed: set[str] = set()
    all_claimed = threading.Condition()
    answer_created = ZkActions._answer_created

    def landed(self: ZkActions, job: str, instant: datetime, claim: Claimed) -> None:
        if job in jobs:
            with all_claimed:
                claimed.add(job)
                if claimed >= jobs:
                    os.kill(os.getpid(), signal.SIGKILL)
                all_claimed.wait_for(lambda: claimed >= jobs, timeout=WAIT_FOR_THE_OTHERS)
        answer_created(self, job, instant, claim)

    ZkActions._answer_created = landed  # type: ignore[method-assign,assignment]


if __name__ == "__main__":
    jobs, separator, *rest = sys.argv[1:]
    if separator != "--":
        sys.exit("usage: python -m tools.die_after_claim JOB[,JOB...] -- <zksched arguments>")
    install(frozenset(j for j in jobs.split(",") if j))
    sys.argv = ["zksched", *rest]
    main()
