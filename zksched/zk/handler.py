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
"""

from __future__ import annotations

import math
import select
import threading
import time
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


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's `SequentialThreadingHandler` with `poll_select` as its select, and `last_reply`."""

    name = "zksched_polling_threading"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # only kazoo's connection thread selects, one at a time
        self._pollers: dict[tuple[tuple[int, int], ...], Any] = {}
        self._io_thread: int | None = None
        self.last_reply: float | None = None  # time.monotonic() of the latest answer

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        self._io_thread = threading.get_ident()  # the thread that reads the answers
        return poll_select(rlist, wlist, xlist, timeout, self._pollers)

    def async_result(self) -> AsyncResult:
        return _ReplyResult(self)

    def note_reply(self) -> None:
        # Results set elsewhere (kazoo's wrappers, on the completion thread, can run late)
        # say nothing about when ZooKeeper answered.
        if threading.get_ident() == self._io_thread:
            self.last_reply = time.monotonic()


def last_reply(handler: Any) -> float | None:
    """When ZooKeeper last answered a request of the client with this handler (monotonic);
    None for another handler or before any answer."""
    return handler.last_reply if isinstance(handler, PollingHandler) else None
