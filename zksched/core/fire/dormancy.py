"""The dormant jobs of a member and when each wakes (`DormantJobs`): one timer for all.

A member may own a million jobs without a machine (member.py). Each wake time is kept
here, grouped by instant (schedules fire on whole seconds, mostly whole minutes: a million
daily jobs share at most 86,400 wake times), and the shell is asked for one timer, the
earliest (`next_wake`), instead of one timer per job.

Invariant: a name's current wake is `get(name)`. A name left in a group after it woke,
left or was put to sleep again is stale and skipped when its group comes due; the groups
are rebuilt when stale names outnumber the dormant jobs, so churn (jobs moving in and out
during a rolling deploy) cannot grow them without bound.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class DormantJobs:
    __slots__ = ("_at", "_entries", "_groups", "_times")

    def __init__(self) -> None:
        self._at: dict[str, float] = {}  # name -> its current wake
        self._groups: dict[float, list[str]] = {}  # wake -> names put to sleep until then
        self._times: list[float] = []  # a heap of the groups' wakes
        self._entries = 0  # names in all groups, stale ones included

    def __contains__(self, name: object) -> bool:
        return name in self._at

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def get(self, name: str) -> float | None:
        return self._at.get(name)

    def sleep(self, name: str, wake: float) -> None:
        """`name` is dormant until `wake` (replacing an earlier wake)."""
        self._at[name] = wake
        self._file(name, wake)
        if self._entries > 2 * len(self._at) + 1024:
            self._regroup()

    def discard(self, name: str) -> None:
        """`name` is dormant no more (woken, dropped, deleted)."""
        self._at.pop(name, None)

    def clear(self) -> None:
        self._at.clear()
        self._regroup()

    @property
    def next_wake(self) -> float | None:
        """The earliest wake of a group (whose names may all be stale: a harmless turn)."""
        times = self._times
        return times[0] if times else None

    def due(self, now: float) -> list[str]:
        """The names whose current wake is `now` or earlier, in the order they were put to
        sleep; their groups are gone (each is still dormant until woken or discarded)."""
        out: list[str] = []
        at, times = self._at, self._times
        while times and times[0] <= now:
            wake = heapq.heappop(times)
            group = self._groups.pop(wake)
            self._entries -= len(group)
            out += [name for name in group if at.get(name) == wake]
        return list(dict.fromkeys(out))  # a name put to sleep twice until one wake: once

    def _file(self, name: str, wake: float) -> None:
        group = self._groups.get(wake)
        if group is None:
            self._groups[wake] = [name]
            heapq.heappush(self._times, wake)
        else:
            group.append(name)
        self._entries += 1

    def _regroup(self) -> None:
        """The groups again from the current wakes alone (stale names dropped)."""
        self._groups, self._times, self._entries = {}, [], 0
        for name, wake in self._at.items():
            self._file(name, wake)
