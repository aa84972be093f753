"""Every znode path zksched reads or writes, in one place.

    /zksched/<client_id>/
        members/<member_id>.<seq>      ephemeral sequential, JSON member record

Folders that can grow with the number of jobs are bucketed so that no `getChildren` reply
comes near ZooKeeper's 1 MB `jute.maxbuffer` (see docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from zksched.core.names import name_problem

ROOT = "/zksched"


@dataclass(frozen=True)
class ClusterPaths:
    client_id: str

    def __post_init__(self) -> None:
        problem = name_problem(self.client_id, "client id")
        if problem:
            raise ValueError(problem)

    @property
    def base(self) -> str:
        return f"{ROOT}/{self.client_id}"

    @property
    def members(self) -> str:
        return f"{self.base}/members"

    def member_prefix(self, member_id: str) -> str:
        """Path prefix for a sequential create; ZooKeeper appends a 10-digit sequence."""
        return f"{self.members}/{member_id}."

    def member(self, znode: str) -> str:
        return f"{self.members}/{znode}"

    @staticmethod
    def member_id_of(znode: str) -> str:
        """`host-123.0000000007` -> `host-123` (the sequence follows the last dot)."""
        return znode.rsplit(".", 1)[0]
