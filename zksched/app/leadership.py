"""Leading the cluster from an app: a term of leadership (`LeaderTerm`), waited for and
watched (`lead`), and changes told to a callback once each (`tell_changes`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from zksched.zk.election import LeaderElection


@dataclass(frozen=True)
class LeaderTerm:
    """One term of this member's leadership (`Cluster.leader()`)."""

    token: int  # the term's fencing token: larger than every earlier term's
    lost: threading.Event  # set once leadership is lost (stop work, do not write)


def tell_changes(election: LeaderElection, callback: Callable[[bool, int | None], None]) -> None:
    """Call `callback(leading, token)` on every change from now on, never the same twice in a
    row; at once if this member leads already."""
    told: list[tuple[bool, int | None]] = []  # what this callback heard last
    mutex = threading.Lock()

    def once(leading: bool, token: int | None) -> None:
        with mutex:  # the worker may publish the same term while we tell it here
            if told and told[-1] == (leading, token):
                return
            told[:] = [(leading, token)]
        callback(leading, token)

    election.add_listener(once)
    token = election.term
    if election.is_leader and token is not None:
        once(True, token)


@contextmanager
def lead(
    election: LeaderElection,
    timeout: float | None,
    client_id: str,
    current: Callable[[], LeaderElection | None],
) -> Iterator[LeaderTerm]:
    """Wait until this member leads (TimeoutError after `timeout`; RuntimeError when its
    Cluster stopped first: `current()` is no longer `election`), then yield the term, whose
    `lost` is set the moment leadership is lost."""
    if not election.wait_for_leadership(timeout):
        if current() is not election:
            raise RuntimeError(f"the Cluster of {client_id} stopped before it led")
        raise TimeoutError(f"not the leader of {client_id} within {timeout:g}s")
    token = election.term
    term = LeaderTerm(token if token is not None else 0, threading.Event())

    def listener(leading: bool, now: int | None) -> None:
        if not leading or now != term.token:
            term.lost.set()

    election.add_listener(listener)
    try:
        if not election.is_leader or election.term != term.token:
            term.lost.set()  # lost between the wait and the listener
        yield term
    finally:
        election.remove_listener(listener)
