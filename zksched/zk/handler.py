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
    rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """`select.select()`'s contract (the same objects back, in lists), built on `poll()`."""
    if timeout is not None:
        if not isinstance(timeout, int | float):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    wanted: dict[int, int] = {}
    objects: dict[int, list[Any]] = {}
    for fileobj in rlist:
        fd = _fd_of(fileobj)
        wanted[fd] = wanted.get(fd, 0) | select.POLLIN | select.POLLPRI
        objects.setdefault(fd, []).append(fileobj)
    for fileobj in wlist:
        fd = _fd_of(fileobj)
        wanted[fd] = wanted.get(fd, 0) | select.POLLOUT
        objects.setdefault(fd, []).append(fileobj)
    poller = select.poll()
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    wait_ms = None if timeout is None else math.ceil(timeout * 1000)
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, events in poller.poll(wait_ms):
        for fileobj in objects.get(fd, ()):
            if events & _READABLE and any(o is fileobj for o in rlist):
                readable.append(fileobj)
            if events & _WRITABLE and any(o is fileobj for o in wlist):
                writable.append(fileobj)
    return readable, writable, []


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's `SequentialThreadingHandler` with `poll_select` as its select."""

    name = "zksched_polling_threading"

    def select(self, *args: Any, **kwargs: Any) -> Any:
        return poll_select(*args, **kwargs)
