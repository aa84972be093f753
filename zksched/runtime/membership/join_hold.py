"""When a starting member may create its node (`JoinHold`).

Into a running cluster, a member joins once its fire thread has weighed every job's owner
(`OwnerChain.weigh_before_joining`): joined earlier, the others would hand it a share it
cannot run yet. It joins at once when it finds nobody else (no share to hand over; members
starting together then see each other before their job tables arrive), and at the latest
`limit` seconds after it first read the members waiting (a job table it cannot read), or
after the job table came, whichever is later (a million jobs take longer than `limit` to
read; weighing a table that was read ends on its own).
"""

from __future__ import annotations

import logging
import threading
import time

from zksched.core.members import Member

log = logging.getLogger(__name__)


class JoinHold:
    def __init__(self, member_id: str, limit: float | None) -> None:
        """`limit` None: no hold, join at once."""
        self._member_id = member_id
        self._limit = limit
        self._until: float | None = None
        self._counted: set[str] = set()  # what the limit was counted from: "view", "table"
        self._allowed = threading.Event()
        if limit is None:
            self._allowed.set()

    def release(self) -> bool:
        """Join now (any thread). True if it was held until now."""
        if self._allowed.is_set():
            return False
        self._allowed.set()
        return True

    def may_join(self, members: tuple[Member, ...] | list[Member]) -> bool:
        """Given the members just read: may this member have a node now?"""
        if not any(m.member_id != self._member_id for m in members):
            self._allowed.set()  # nobody else there: nothing to wait for
        return self._allowed.is_set()

    def waiting(self) -> None:
        """A view without our node was published: the limit counts from the first."""
        self._count_from("view")

    def table_read(self) -> None:
        """The job table came (any thread): the limit counts from the first, too."""
        self._count_from("table")

    def _count_from(self, what: str) -> None:
        """The limit also counts from now, once per `what`: the later deadline holds."""
        if what in self._counted or self._limit is None or self._allowed.is_set():
            return
        self._counted.add(what)
        self._until = max(self._until or 0.0, time.monotonic() + self._limit)

    def overdue(self, now: float) -> bool:
        """Held past the limit: from now on it may join (said once, as a warning)."""
        if self._allowed.is_set() or self._until is None or now < self._until:
            return False
        log.warning(
            "joining the cluster %.0fs after reading it or its job table, before this "
            "member was ready (the job table not read yet?): its share may wait while it "
            "catches up",
            self._limit,
            extra={"event": "join-unready"},
        )
        self._allowed.set()
        return True
