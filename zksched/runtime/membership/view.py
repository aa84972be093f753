"""What a member knows of the cluster at one moment: `ClusterView` (published by
`ClusterMembership` on every change; read by the fire engine)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from zksched.core.jobspec import JobSpec
from zksched.core.members import Member
from zksched.core.owners import OwnerTable


@dataclass(frozen=True)
class ClusterView:
    """What this member knows of the cluster at one moment. Immutable; swapped atomically."""

    connected: bool
    session_id: int | None
    member_id: str
    my_znode: str | None
    table: OwnerTable
    # This member's record while it waits to join (connected, no node yet): the fire engine
    # weighs every job with it beforehand, so that joining moves its share without delay.
    joining: Member | None = None

    @cached_property  # asked for every job in a reconcile: once per view
    def active(self) -> bool:
        """True when this member may own jobs: connected, and present in the table it read."""
        return (
            self.connected
            and self.my_znode is not None
            and any(m.znode == self.my_znode for m in self.table.members)
        )

    def owns(self, job: str, labels: Mapping[str, str]) -> bool:
        """By labels alone (members' command allow-lists left out)."""
        return self.active and self.table.owner(job, labels) == self.member_id

    def owns_job(self, job: str, spec: JobSpec) -> bool:
        """With members' command allow-lists (the job's command and env)."""
        return self.active and self.table.job_owner(job, spec) == self.member_id

    @property
    def digest(self) -> str:
        """A short fingerprint of the membership the table is built from (for comparisons)."""
        ids = ",".join(self.table.member_ids)
        return hashlib.sha256(ids.encode()).hexdigest()[:12]
