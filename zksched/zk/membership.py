"""Membership: this process's ephemeral sequential member znode, and reading everyone's.

Registration survives the classic traps (ZOOKEEPER-NOTES.md):
- a create whose reply was lost (ConnectionLoss, or our own call deadline) may have
  succeeded: before creating again we look for a node of ours, recognised by its
  ephemeralOwner (our session id), and we delete any extra one we find later;
- after session expiry the old node is gone with the old session: we create a new one.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zksched.core.members import Member, MemberRecordError, member_from_record, sequence_of
from zksched.core.znodedata import load_json
from zksched.zk.connection import wait
from zksched.zk.paths import ClusterPaths

MAX_MEMBER_BYTES = 64 * 1024  # a member record is a few hundred bytes (its allow-list: more)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberSnapshot:
    """The members folder as read at one moment."""

    members: tuple[Member, ...]
    owners: dict[str, int] = field(default_factory=dict)  # znode -> ephemeral owner session
    invalid: dict[str, str] = field(default_factory=dict)  # znode -> why it was ignored

    def of_session(self, session_id: int) -> list[str]:
        """Znodes owned by this session, whatever their data: a valid record first, then by
        sequence."""
        valid = {m.znode for m in self.members}
        found = [z for z, owner in self.owners.items() if owner == session_id]
        return sorted(found, key=lambda z: (z not in valid, sequence_of(z)))


def encode_member(member: Member) -> bytes:
    record = member.to_record()
    record.pop("znode")
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


class MemberReader:
    """Reads the members folder, caching each node's data (member nodes never change)."""

    def __init__(self, client: KazooClient, paths: ClusterPaths, timeout: float) -> None:
        self._client = client
        self._paths = paths
        self._timeout = timeout
        self._cache: dict[str, tuple[Member | None, int, str]] = {}

    def read(self, watch: Callable[[Any], None] | None = None) -> MemberSnapshot:
        """One consistent-enough read; `watch` (one-shot) fires on the next change."""
        children = wait(self._client.get_children_async(self._paths.members, watch), self._timeout)
        fresh = [c for c in children if c not in self._cache]
        pending = [(c, self._client.get_async(self._paths.member(c))) for c in fresh]
        for znode, result in pending:
            try:
                data, stat = wait(result, self._timeout)
            except NoNodeError:
                continue  # left between the listing and the read
            self._cache[znode] = self._decode(znode, data, stat.ephemeralOwner)
        live = set(children)
        for gone in [z for z in self._cache if z not in live]:
            del self._cache[gone]
        members: list[Member] = []
        owners: dict[str, int] = {}
        invalid: dict[str, str] = {}
        for znode in sorted(live & self._cache.keys()):
            member, owner, problem = self._cache[znode]
            owners[znode] = owner
            if member is None:
                invalid[znode] = problem
            else:
                members.append(member)
        return MemberSnapshot(tuple(members), owners, invalid)

    @staticmethod
    def _decode(znode: str, data: bytes, owner: int) -> tuple[Member | None, int, str]:
        try:
            if owner == 0:
                # every member's node is ephemeral, owned by its live session: a persistent
                # one (made by hand or by a tool) would be given jobs that never run
                raise MemberRecordError("it is not ephemeral, so no live member made it")
            record = load_json(data, f"member znode {znode}", MAX_MEMBER_BYTES)
            return member_from_record(znode, record), owner, ""
        except (ValueError, MemberRecordError) as exc:
            log.error("ignoring member znode %s: %s", znode, exc)
            return None, owner, str(exc)


class MemberRegistration:
    """This process's member znode. `ensure()` is idempotent within a session."""

    def __init__(
        self, client: KazooClient, paths: ClusterPaths, member: Member, timeout: float
    ) -> None:
        self._client = client
        self._paths = paths
        self._member = member
        self._timeout = timeout
        self.znode: str | None = None
        self.session_id: int | None = None

    @property
    def member_id(self) -> str:
        return self._member.member_id

    def ensure(self, snapshot: MemberSnapshot) -> str:
        """Make sure exactly one node of ours exists in the current session; return its name.

        `snapshot` must be read after any earlier attempt: it carries each node's ephemeral
        owner, which is how a node from a create whose reply was lost is recognised.
        Raises kazoo errors (ConnectionLoss, timeouts): the caller retries later.
        """
        session_id = self._client.client_id[0] if self._client.client_id else None
        if session_id is None:
            raise RuntimeError("not connected")
        ours = snapshot.of_session(session_id)
        if ours:
            keep, extra = ours[0], ours[1:]
            for znode in extra:
                log.warning("deleting duplicate member node %s of this session", znode)
                self._delete(znode)
            self.znode, self.session_id = keep, session_id
            return keep
        path = wait(
            self._client.create_async(
                self._paths.member_prefix(self.member_id),
                encode_member(self._member),
                ephemeral=True,
                sequence=True,
            ),
            self._timeout,
        )
        self.znode, self.session_id = path.rsplit("/", 1)[1], session_id
        log.info("joined as %s (session 0x%x)", self.znode, session_id)
        return self.znode

    def leave(self) -> None:
        """Delete our node (graceful stop): survivors' watches fire at once."""
        if self.znode is not None:
            self._delete(self.znode)
            self.znode = None

    def _delete(self, znode: str) -> None:
        with contextlib.suppress(NoNodeError):
            wait(self._client.delete_async(self._paths.member(znode)), self._timeout)
