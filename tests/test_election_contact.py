"""LeaderElection.contact: the member's watchdog verdict overrides kazoo's CONNECTED."""

from __future__ import annotations

from typing import Any

from zksched.zk.election import LeaderElection
from zksched.zk.paths import ClusterPaths


class QuietClient:
    """What the election reads of a kazoo client outside its worker: state and session."""

    state = "CONNECTED"
    client_id = (7, b"")

    def add_listener(self, _listener: Any) -> None:
        pass


def test_no_term_is_ours_without_contact_and_the_listeners_hear_it() -> None:
    election = LeaderElection(QuietClient(), ClusterPaths("c1"), "m1")  # type: ignore[arg-type]
    heard: list[tuple[bool, int | None]] = []
    election.add_listener(lambda leading, token: heard.append((leading, token)))
    election._node_session, election._czxid = 7, 42
    election._publish(True)
    assert election.is_leader and election.term == 42

    election.contact(False)  # the watchdog: no word from ZooKeeper for too long
    assert not election.is_leader and election.term is None  # at once, before the worker
    election._publish(True)  # the worker's own look cannot make it ours again
    assert not election.is_leader and heard == [(True, 42), (False, None)]

    election.contact(True)
    election._publish(True)
    assert election.is_leader and heard[-1] == (True, 42)
