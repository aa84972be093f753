"""A Cluster started in a process and then forked (gunicorn --preload, multiprocessing):
the child's copy refuses to act for the parent's member."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import pytest

from zksched import Cluster


class _Stub:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a forked child touched the parent's {name}")


def started_then_forked(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster("127.0.0.1:1", "fork-tests")
    # what start() leaves behind, without ZooKeeper
    c._daemon, c._coordinator, c._election = _Stub(), _Stub(), _Stub()
    c._started_pid = os.getpid()
    parent = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: parent + 1)  # now in the child
    return c


def test_the_child_of_a_started_cluster_says_so_and_never_acts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = started_then_forked(monkeypatch)
    with pytest.raises(RuntimeError, match="is a fork of it"):
        c.start()
    with pytest.raises(RuntimeError, match="post_fork"):
        c.claim("reindex", datetime.now(UTC))
    with pytest.raises(RuntimeError, match="is a fork of it"):
        c.lock("migrations")
    # the parent's leadership and session are not the child's
    assert not c.is_leader() and c.leader_term() is None
    assert not c.connected and not c.is_owner("reindex") and not c.running
    c.stop()  # lets go of the parent's member without touching ZooKeeper


def test_a_cluster_made_before_the_fork_and_started_after_is_fine() -> None:
    c = Cluster("127.0.0.1:1", "fork-tests")
    assert not c.running and not c._forked()
