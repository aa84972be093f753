"""kazoo's threading handler, with a cheaper `select()`.

kazoo's connection thread calls `handler.select()` once per request sent and once per reply
read. The stock handler builds a new epoll selector each time (epoll_create, register,
wait, close: four system calls and a few Python objects); at hundreds of fires a second
that was about a tenth of the daemon's CPU (py-spy, docs/benchmarks.md). A `poll()` object
does the same job in one system call after a cheap setup, and like epoll it has no limit
on descriptor numbers (a daemon running hundreds of commands holds thousands of fds, past
`select()`'s 1024).
"""

from __future__ import annotations

import math
import select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler

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


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's `SequentialThreadingHandler` with `poll_select` as its select."""

    name = "zksched_polling_threading"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # only kazoo's connection thread selects, one at a time
        self._pollers: dict[tuple[tuple[int, int], ...], Any] = {}

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(rlist, wlist, xlist, timeout, self._pollers)
