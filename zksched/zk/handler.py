"""kazoo's threading handler, with a cheaper `select()`.

kazoo's connection thread calls `handler.select()` once per request sent and once per reply
read. The stock handler builds a new epoll selector each time (epoll_create, register,
wait, close: four system calls and a few Python objects); at hundreds of fires a second
that was about a tenth of the daemon's CPU (py-spy, docs/benchmarks.md). A `poll()` object
does the same job in one system call after a cheap setup, and like epoll it has no limit
on descriptor numbers (a daemon running hundreds of commands holds thousands of fds, past
`select()`'s 1024).

It also tells when ZooKeeper last answered a request of this client (`last_reply`): the
contact watchdog's probe waits behind every request queued before it, so in a burst of fires
its reply can come seconds after ZooKeeper answered all the others. Only answers count, read
by kazoo's I/O thread as they arrive: not watch notifications (they come even when ZooKeeper
no longer hears us), not the connection-loss errors kazoo sets on requests it gives up.
Answers that set no result (to kazoo's pings, to the connect) are noted by the clients
`connection.make_client` builds.

And it bounds each connect attempt (`Handshake`): kazoo waits for the answer to its Connect
request as long as the whole session timeout. Through a path that accepts connections but
answers nothing (a proxy or load balancer in front of a partition), an attempt made during
a short cut would sit there until the session is gone, though the path healed long before.
"""

from __future__ import annotations

import math
import random
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    InvalidACLError,
    NoAuthError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

# While the session may live on the server, a retry (the next connect attempt) follows a
# failed one after at most this long, instead of kazoo's growing backoff.
RECONNECT_GAP = 0.1
_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


def _fd_of(fileobj: Any) -> int:
    fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
    if not isinstance(fd, int) or fd < 0:
        # what kazoo's own select raises for a closed socket; its callers expect it
        raise ValueError(f"invalid file descriptor {fd!r}")
    return fd


def poll_select(
    rlist: list[Any],
    wlist: list[Any],
    xlist: list[Any],
    timeout: float | None = None,
    pollers: dict[tuple[tuple[int, int], ...], Any] | None = None,
) -> tuple[list[Any], list[Any], list[Any]]:
    """`select.select()`'s contract (the same objects back, in lists), built on `poll()`.

    `pollers` caches one poll object per set of (fd, events): kazoo's loop asks about the
    same two descriptors every time. A poll object holds only numbers, so a closed and
    reused descriptor number is harmless."""
    if timeout is not None:
        if not isinstance(timeout, int | float):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    wanted: dict[int, int] = {}
    readers: dict[int, list[Any]] = {}
    writers: dict[int, list[Any]] = {}
    for fileobj in rlist:
        fd = _fd_of(fileobj)
        wanted[fd] = wanted.get(fd, 0) | select.POLLIN | select.POLLPRI
        readers.setdefault(fd, []).append(fileobj)
    for fileobj in wlist:
        fd = _fd_of(fileobj)
        wanted[fd] = wanted.get(fd, 0) | select.POLLOUT
        writers.setdefault(fd, []).append(fileobj)
    key = tuple(sorted(wanted.items()))
    poller = pollers.get(key) if pollers is not None else None
    if poller is None:
        poller = select.poll()
        for fd, mask in wanted.items():
            poller.register(fd, mask)
        if pollers is not None:
            if len(pollers) >= 16:
                pollers.clear()
            pollers[key] = poller
    wait_ms = None if timeout is None else math.ceil(timeout * 1000)
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, events in poller.poll(wait_ms):
        if events & _READABLE and fd in readers:
            readable += readers[fd]
        if events & _WRITABLE and fd in writers:
            writable += writers[fd]
    return readable, writable, []


# Errors only an answer from ZooKeeper carries (kazoo sets connection-loss and session errors
# on pending requests itself, with no answer behind them).
ANSWERED_ERRORS = (
    NoNodeError,
    NodeExistsError,
    BadVersionError,
    NotEmptyError,
    NoChildrenForEphemeralsError,
    BadArgumentsError,
    NoAuthError,
    InvalidACLError,
)


class _ReplyResult(AsyncResult):  # type: ignore[misc]
    """kazoo's AsyncResult, telling its handler when kazoo's I/O thread answers it."""

    def set(self, value: Any = None) -> None:
        self._handler.note_reply()
        super().set(value)

    def set_exception(self, exception: BaseException) -> None:
        if isinstance(exception, ANSWERED_ERRORS):
            self._handler.note_reply()
        super().set_exception(exception)


class Handshake:
    """How long one connect attempt may wait: the TCP (and TLS) connect, then the answer to
    kazoo's Connect request. `first` seconds; once the session cannot be alive any more on
    the server (no answer for `session` seconds), doubled after every `RUNS_OUT` attempts in
    a row that ran out, up to `limit` (kazoo's own bound); back to `first` once an attempt
    gets through. A server slower than `first` is still reached, a few attempts later; an
    attempt made during a short cut does not hold the next ones back, and while the session
    may live every attempt is short, so the first one after the path heals keeps it."""

    RUNS_OUT = 3

    def __init__(self, first: float, limit: float, session: float = 0.0) -> None:
        self.first = first
        self.limit = max(first, limit)
        self.session = session
        self.allowed = first
        self._missed = 0  # attempts in a row that ran out
        self._socket: Any = None  # the socket of the attempt under way
        self._deadline = 0.0
        self._capped = False

    def began(self, sock: Any) -> None:
        self._socket, self._deadline, self._capped = sock, time.monotonic() + self.allowed, False

    def bound(self, rlist: list[Any], wlist: list[Any], timeout: float | None) -> float | None:
        """The timeout for one select of kazoo's connection thread."""
        if self._socket is None:
            return timeout
        if len(rlist) > 1:  # kazoo's main loop (its socket and its wake-up pipe): through
            self._socket, self.allowed, self._missed = None, self.first, 0
            return timeout
        if self._socket not in rlist and self._socket not in wlist:
            return timeout
        left = max(0.0, self._deadline - time.monotonic())
        if timeout is None or left < timeout:
            self._capped = True
            return left
        return timeout

    def selected(self, ready: bool, last_reply: float | None = None) -> None:
        if not ready and self._capped:  # kazoo now gives this attempt up
            self.ran_out(last_reply)

    def ran_out(self, last_reply: float | None = None) -> None:
        """The attempt under way ran out of time (`last_reply`: when ZooKeeper last
        answered, monotonic)."""
        self._socket, self._missed = None, self._missed + 1
        if session_may_live(last_reply, self.session):
            return
        if self._missed % self.RUNS_OUT == 0:
            self.allowed = min(self.limit, self.allowed * 2)


def session_may_live(last_reply: float | None, session: float) -> bool:
    """Whether the server may still hold the session: it answered less than a session
    timeout ago (it cannot expire a session sooner after it last heard from the client)."""
    return last_reply is not None and time.monotonic() - last_reply < session


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's `SequentialThreadingHandler` with `poll_select` as its select, `last_reply`,
    and connect attempts bounded by `handshake` (None: kazoo's own bounds)."""

    name = "zksched_polling_threading"

    def __init__(
        self,
        *args: Any,
        handshake: Handshake | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._sleep = sleep
        # only kazoo's connection thread selects, one at a time
        self._pollers: dict[tuple[tuple[int, int], ...], Any] = {}
        self._io_thread: int | None = None
        self.last_reply: float | None = None  # time.monotonic() of the latest answer
        # seconds: the session timeout the server granted at the latest connect (its
        # min/maxSessionTimeout clamp what was asked); set by connection.make_client
        self.granted_timeout: float | None = None
        self.handshake = handshake

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        self._io_thread = threading.get_ident()  # the thread that reads the answers
        handshake = self.handshake
        if handshake is None:
            return poll_select(rlist, wlist, xlist, timeout, self._pollers)
        bounded = handshake.bound(rlist, wlist, timeout)
        ready = poll_select(rlist, wlist, xlist, bounded, self._pollers)
        handshake.selected(bool(ready[0] or ready[1]), self.last_reply)
        return ready

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        handshake = self.handshake
        if handshake is None or kwargs.get("timeout") is None:
            return super().create_connection(*args, **kwargs)
        kwargs["timeout"] = min(kwargs["timeout"], handshake.allowed)
        try:
            sock = super().create_connection(*args, **kwargs)
        except TimeoutError:
            handshake.ran_out(self.last_reply)
            raise
        handshake.began(sock)
        return sock

    def sleep_func(self, seconds: float) -> None:
        """kazoo's pause between retries (connect attempts among them): at most
        `RECONNECT_GAP` (jittered) while the session may live on the server, so that the
        member is back soon after a short cut; as asked once the session cannot live."""
        handshake = self.handshake
        if handshake is not None and session_may_live(self.last_reply, handshake.session):
            seconds = min(seconds, RECONNECT_GAP * random.uniform(0.5, 1.0))
        self._sleep(seconds)

    def async_result(self) -> AsyncResult:
        return _ReplyResult(self)

    def note_reply(self) -> None:
        # Results set elsewhere (kazoo's wrappers, on the completion thread, can run late)
        # say nothing about when ZooKeeper answered.
        if threading.get_ident() == self._io_thread:
            self.last_reply = time.monotonic()


def session_timeout_of(client: Any, asked: float) -> float:
    """The session timeout to act on, in seconds: the one `asked` for, or the one the server
    granted when that is shorter (it expires the session by the granted one)."""
    granted = getattr(client.handler, "granted_timeout", None)
    return asked if granted is None else min(asked, granted)


def last_reply(handler: Any) -> float | None:
    """When ZooKeeper last answered a request of the client with this handler (monotonic);
    None for another handler or before any answer."""
    return handler.last_reply if isinstance(handler, PollingHandler) else None
