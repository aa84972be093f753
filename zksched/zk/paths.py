"""Every znode path zksched reads or writes, in one place.

    /zksched/<client_id>/
        members/<member_id>.<seq>           ephemeral sequential: a live member (JSON)
        jobs                                the job table's root: generation and bucket ids
        jobs/blobs/<id>                     a bucket of job records (content-addressed JSON)
        fires/<bb>/<job>                    a job's fire folder; data {"pruned_through": <instant>}
        fires/<bb>/<job>/<instant>          one fire record per (job, UTC instant)
        fence                               empty; a batch of claims also writes it: its
                                            mzxid is their fencing token
        locks/<bb>/<job>                    the job's kazoo Lock
        triggers/<job>.<seq>                a pending `jobs trigger`
        clocks/<member_id>                  ephemeral: the member's measured clock offset
        leader/<nonce>__cand__<seq>         ephemeral sequential: a leader-election candidate
        applocks/<bb>/<name>                an app's named lock (the coordination API)

Folders that grow with the number of jobs (`fires`, `locks`) are split into 256 buckets
`<bb>` by a hash of the job name, so that no `getChildren` reply comes near ZooKeeper's 1 MB
`jute.maxbuffer` (100,000 jobs: ~400 children a bucket). A job's own fire folder holds at
most its `history` records plus a few.
"""

from __future__ import annotations

from dataclasses import dataclass

import mmh3

from zksched.core.names import name_problem

ROOT = "/zksched"
BUCKETS = 256


def bucket_of(name: str) -> str:
    """Two hex digits: which of the 256 folders holds this job's fires and lock."""
    return f"{mmh3.hash(name.encode(), 0, False) % BUCKETS:02x}"


def instant_node(instant_utc: str) -> str:
    """`2026-01-02T02:00:00Z` is a valid znode name as it stands, and sorts by time."""
    return instant_utc


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

    # members
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

    # the job table
    @property
    def jobs(self) -> str:
        return f"{self.base}/jobs"

    @property
    def blobs(self) -> str:
        return f"{self.jobs}/blobs"

    def blob(self, blob_id: str) -> str:
        return f"{self.blobs}/{blob_id}"

    # fires, locks, triggers
    @property
    def fires(self) -> str:
        return f"{self.base}/fires"

    def job_fires(self, job: str) -> str:
        return f"{self.fires}/{bucket_of(job)}/{job}"

    def fire(self, job: str, instant_utc: str) -> str:
        return f"{self.job_fires(job)}/{instant_node(instant_utc)}"

    @property
    def fence(self) -> str:
        return f"{self.base}/fence"

    # at-least-once jobs: an ephemeral marker per claim, alive while its claimer's session is
    @property
    def live(self) -> str:
        return f"{self.base}/live"

    def job_live(self, job: str) -> str:
        return f"{self.live}/{bucket_of(job)}/{job}"

    def live_marker(self, job: str, instant_utc: str, nonce: str) -> str:
        return f"{self.job_live(job)}/{instant_node(instant_utc)}@{nonce}"

    @property
    def locks(self) -> str:
        return f"{self.base}/locks"

    def job_lock(self, job: str) -> str:
        return f"{self.locks}/{bucket_of(job)}/{job}"

    @property
    def triggers(self) -> str:
        return f"{self.base}/triggers"

    def trigger_prefix(self, job: str) -> str:
        return f"{self.triggers}/{job}."

    @staticmethod
    def job_of_trigger(znode: str) -> str:
        return znode.rsplit(".", 1)[0]

    # clock-offset probes
    @property
    def clocks(self) -> str:
        return f"{self.base}/clocks"

    def clock(self, member_id: str) -> str:
        return f"{self.clocks}/{member_id}"

    # the coordination API for apps that keep their own timer (app/coordination.py)
    @property
    def leader(self) -> str:
        """The cluster's one leader election: a candidate per member that runs it."""
        return f"{self.base}/leader"

    def leader_candidate_prefix(self, nonce: str) -> str:
        """Prefix of a candidate's sequential create. The nonce (hex) makes the name ours
        alone, so that a create whose reply was lost can be found again."""
        if not nonce.isalnum():
            raise ValueError(f"a candidate nonce must be letters and digits, not {nonce!r}")
        return f"{self.leader}/{nonce}__cand__"

    @property
    def applocks(self) -> str:
        """App locks live apart from `locks/`: an app lock named like a job never
        contends with that job's run lock."""
        return f"{self.base}/applocks"

    def app_lock(self, name: str) -> str:
        problem = name_problem(name, "lock name")
        if problem:
            raise ValueError(problem)
        return f"{self.applocks}/{bucket_of(name)}/{name}"
