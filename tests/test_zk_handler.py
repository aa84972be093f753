"""The poll-based select that kazoo's connection thread uses (zksched/zk/handler.py)."""

from __future__ import annotations

import os
import resource
import socket
import time

import pytest

from zksched.zk.handler import PollingHandler, poll_select


def test_readable_once_data_arrives_and_writable_when_buffer_has_room() -> None:
    a, b = socket.socketpair()
    with a, b:
        assert poll_select([a], [], [], 0) == ([], [], [])
        b.send(b"x")
        assert poll_select([a], [b], [], 1) == ([a], [b], [])


def test_the_same_objects_come_back_including_plain_fds() -> None:
    r, w = os.pipe()
    try:
        os.write(w, b"x")
        readable, writable, _ = poll_select([r], [w], [], 1)
        assert readable == [r] and writable == [w]
    finally:
        os.close(r)
        os.close(w)


def test_timeout_returns_nothing_after_waiting() -> None:
    a, b = socket.socketpair()
    with a, b:
        started = time.monotonic()
        assert poll_select([a], [], [], 0.05) == ([], [], [])
        assert time.monotonic() - started >= 0.04


def test_a_hung_up_peer_counts_as_readable() -> None:
    a, b = socket.socketpair()
    with a:
        b.close()
        assert poll_select([a], [], [], 1)[0] == [a]


def test_closed_socket_and_bad_timeouts_are_refused_like_kazoo_does() -> None:
    a, b = socket.socketpair()
    b.close()
    a.close()
    with pytest.raises(ValueError):
        poll_select([a], [], [], 0)
    c, d = socket.socketpair()
    with c, d:
        with pytest.raises(ValueError):
            poll_select([c], [], [], -1)
        with pytest.raises(TypeError):
            poll_select([c], [], [], "1")  # type: ignore[arg-type]


def test_descriptors_past_select_limit_work() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1500 if hard == resource.RLIM_INFINITY else min(1500, hard - 1)
    assert target > 1024, "the test needs a descriptor number past select()'s limit"
    if soft <= target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target + 1, hard))
    a, b = socket.socketpair()
    high = os.dup2(a.fileno(), target)
    try:
        b.send(b"x")
        assert poll_select([high], [], [], 1)[0] == [high]
    finally:
        os.close(high)
        a.close()
        b.close()


def test_handler_uses_it() -> None:
    a, b = socket.socketpair()
    with a, b:
        b.send(b"x")
        assert PollingHandler().select([a], [], [], 1)[0] == [a]


def test_the_handler_reuses_one_poll_object_per_descriptor_set() -> None:
    handler = PollingHandler()
    a, b = socket.socketpair()
    with a, b:
        for _ in range(3):
            assert handler.select([a, b], [], [], 0) == ([], [], [])
        assert len(handler._pollers) == 1
        b.send(b"x")
        assert handler.select([a, b], [], [], 1)[0] == [a]
        assert handler.select([a], [b], [], 1) == ([a], [b], [])
        assert len(handler._pollers) == 2
