"""The poll-based select that kazoo's connection thread uses (zksched/zk/handler.py)."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import SequentialThreadingHandler

from zksched.zk.handler import (
    Handshake,
    PollingHandler,
    last_reply,
    poll_select,
    session_timeout_of,
)


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


def _io_thread_of(handler: PollingHandler) -> None:
    """Make the calling thread the handler's I/O thread, as kazoo's loop does by selecting."""
    r, w = os.pipe()
    try:
        handler.select([r], [], [], 0)
    finally:
        os.close(r)
        os.close(w)


def test_an_answer_read_by_the_io_thread_is_a_reply() -> None:
    handler = PollingHandler()
    _io_thread_of(handler)
    assert last_reply(handler) is None
    before = time.monotonic()
    handler.async_result().set("ok")
    first = last_reply(handler)
    assert first is not None and first >= before
    handler.async_result().set_exception(NoNodeError())  # an answer too: "no such node"
    second = last_reply(handler)
    assert second is not None and second >= first


@pytest.mark.parametrize(
    "error", [ConnectionLoss(), SessionExpiredError(), ConnectionClosedError("closed")]
)
def test_errors_kazoo_sets_itself_are_no_reply(error: Exception) -> None:
    handler = PollingHandler()
    _io_thread_of(handler)
    handler.async_result().set_exception(error)
    assert last_reply(handler) is None


def test_results_set_on_other_threads_are_no_reply() -> None:
    handler = PollingHandler()
    _io_thread_of(handler)
    result = handler.async_result()
    other = threading.Thread(target=result.set, args=("late",))  # a kazoo wrapper, say
    other.start()
    other.join()
    assert result.get(timeout=1) == "late"
    assert last_reply(handler) is None


def test_another_handler_has_no_replies_to_tell() -> None:
    assert last_reply(SequentialThreadingHandler()) is None


# -- Handshake: how long one connect attempt may wait ------------------------------------


def test_a_connect_attempt_waits_at_most_what_is_allowed() -> None:
    shake = Handshake(first=0.5, limit=4.0)
    sock, wake = object(), object()
    shake.began(sock)
    assert shake.bound([sock], [], 10.0) <= 0.5  # the Connect request's answer
    assert shake.bound([], [sock], None) <= 0.5  # sending it
    assert shake.bound([other := object()], [], 10.0) == 10.0  # not the attempt's socket
    assert other is not sock
    assert shake.bound([sock, wake], [], 7.0) == 7.0  # kazoo's main loop: through
    shake.began(sock)
    assert shake.bound([sock], [], 10.0) <= 0.5  # a new attempt is bounded again


def test_attempts_that_run_out_in_a_row_wait_longer_and_one_through_resets() -> None:
    shake = Handshake(first=0.5, limit=1.5)
    sock = object()
    allowed = []
    for _ in range(9):
        shake.began(sock)
        shake.bound([sock], [], 10.0)
        shake.selected(False)  # ran out: kazoo gives the attempt up
        allowed.append(shake.allowed)
    assert allowed == [0.5, 0.5, 1.0, 1.0, 1.0, 1.5, 1.5, 1.5, 1.5]  # capped at the limit
    shake.began(sock)
    shake.bound([sock, object()], [], 1.0)
    assert shake.allowed == 0.5


def test_attempts_stay_short_while_the_session_may_live_on_the_server() -> None:
    """Lengthening attempts is for a slow server; while ZooKeeper answered less than a
    session ago (a short cut), every attempt stays short, so the one under way when the path
    heals ends soon and the next one keeps the session."""
    shake = Handshake(first=0.5, limit=4.0, session=4.0)
    sock = object()
    heard = time.monotonic() - 3.0
    for _ in range(6):
        shake.began(sock)
        shake.bound([sock], [], 10.0)
        shake.selected(False, heard)
    assert shake.allowed == 0.5
    for _ in range(3):  # nothing heard for longer than the session: it is gone anyway
        shake.began(sock)
        shake.bound([sock], [], 10.0)
        shake.selected(False, heard - 2.0)
    assert shake.allowed == 1.0


def test_the_pause_between_connect_attempts_is_short_while_the_session_may_live() -> None:
    from zksched.zk.handler import RECONNECT_GAP

    slept: list[float] = []
    handler = PollingHandler(handshake=Handshake(0.5, 4.0, session=4.0), sleep=slept.append)
    pause = handler.sleep_func
    pause(0.3)  # never connected: kazoo's own pause
    handler.last_reply = time.monotonic() - 1.0
    pause(30.0)  # kazoo's backoff asked for 30 s: capped
    handler.last_reply = time.monotonic() - 5.0
    pause(0.7)  # the session cannot live any more: kazoo's own pause
    assert slept[0] == 0.3 and slept[2] == 0.7
    assert RECONNECT_GAP / 2 <= slept[1] <= RECONNECT_GAP


def test_an_answer_in_time_is_not_counted_as_running_out() -> None:
    shake = Handshake(first=0.5, limit=4.0)
    sock = object()
    for _ in range(6):
        shake.began(sock)
        shake.bound([sock], [], 10.0)
        shake.selected(True)
    assert shake.allowed == 0.5


def test_the_handler_bounds_a_select_on_a_silent_attempt() -> None:

    a, b = socket.socketpair()
    try:
        handler = PollingHandler(handshake=Handshake(first=0.2, limit=1.0))
        assert handler.handshake is not None
        handler.handshake.began(a)
        t0 = time.monotonic()
        assert handler.select([a], [], [], 30) == ([], [], [])  # b never writes
        assert time.monotonic() - t0 < 10  # bounded by the attempt, not the 30 s asked
    finally:
        a.close()
        b.close()


def test_the_session_timeout_acted_on_is_the_shorter_of_asked_and_granted() -> None:
    handler = PollingHandler()
    client = SimpleNamespace(handler=handler)
    assert session_timeout_of(client, 10.0) == 10.0  # not connected yet: the one asked for
    handler.granted_timeout = 4.0  # the server's maxSessionTimeout
    assert session_timeout_of(client, 10.0) == 4.0
    handler.granted_timeout = 20.0  # its minSessionTimeout: the shorter still
    assert session_timeout_of(client, 10.0) == 10.0
    plain = SimpleNamespace(handler=SequentialThreadingHandler())  # kazoo's own handler
    assert session_timeout_of(plain, 10.0) == 10.0
