"""What the status side reads of a member (`StatusSource`): a narrow view, all in memory.

`DaemonStatus` is given this, not the whole daemon, so the status side depends on the
membership and fire packages' values only, and the daemon on the status side, one way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from zksched.runtime.membership import ClusterView, JobsSnapshot

FireObserver = Callable[[Mapping[str, object]], None]  # a fire's start or result, as logged
SkipObserver = Callable[[str, str, int], None]  # job, reason, count
CatchupObserver = Callable[[str, int], None]  # job, instants sent to a catch-up claim


class StatusSource(Protocol):
    """A running member, as its health, readiness, metrics and status page see it."""

    @property
    def client_id(self) -> str: ...

    @property
    def member_id(self) -> str: ...

    @property
    def session_timeout(self) -> float: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def view(self) -> ClusterView: ...

    def now(self) -> float:
        """The member's clock (the one its fire timer runs on), epoch seconds."""
        ...

    def now_dt(self) -> datetime: ...

    def job_table(self) -> JobsSnapshot:
        """The job table as last read (generation -1: not read yet)."""
        ...

    def heartbeats(self) -> Mapping[str, float]:
        """Each loop's name and seconds since it last beat."""
        ...

    def owned_count(self) -> int: ...

    def clock_offset(self) -> float | None:
        """This member's last measured clock offset from ZooKeeper's, seconds (None: none)."""
        ...

    def observe(
        self, on_fire: FireObserver, on_skip: SkipObserver, on_catchup: CatchupObserver
    ) -> None:
        """Call these on every fire event, skip and catch-up claim from now on."""
        ...
