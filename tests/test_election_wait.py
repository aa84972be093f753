"""LeaderElection.wait_for_leadership ends when the election stops (a thread blocked in
`with cluster.leader():` must not outlive `cluster.stop()`)."""

from __future__ import annotations

import threading
from unittest.mock import MagicMock

from zksched.zk.election import LeaderElection
from zksched.zk.paths import ClusterPaths


def test_a_wait_for_leadership_without_timeout_returns_false_on_stop() -> None:
    client = MagicMock()  # never CONNECTED: this candidate never leads
    election = LeaderElection(client, ClusterPaths("c"), "m1", call_timeout=0.1)
    election.start()
    answers: list[bool] = []
    waiter = threading.Thread(
        target=lambda: answers.append(election.wait_for_leadership()), daemon=True
    )
    waiter.start()
    assert not election.wait_for_leadership(0.05)  # a timeout still ends it
    election.stop()
    waiter.join(5)
    assert not waiter.is_alive() and answers == [False]
