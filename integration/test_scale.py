"""100,000 jobs: no folder zksched writes may list past ZooKeeper's 1 MB reply limit.

`jute.maxbuffer` (1 MB by default) caps every reply, and Java tools (zkCli, Curator) refuse
larger ones, so a `getChildren` of ~100k names would break operators' tools. The layout
buckets what grows with the number of jobs (docs/architecture.md); this applies 100,000 jobs
through the real `jobs apply`, gives every job the fire and lock folders its fires create
(paths from ClusterPaths, as the fire path makes them), and lists every folder that can grow.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from integration.harness import run_cli
from tools.zkserver import ZkServer
from zksched.zk.jobstore import JobStore
from zksched.zk.paths import BUCKETS, ClusterPaths

JOBS = 100_000
# A getChildren2 reply: header (16) + vector length (4) + per name a length (4) and the
# UTF-8 bytes + the folder's stat (68); rounded up.
REPLY_OVERHEAD = 128
ONE_MB = 1_048_575
WELL_UNDER = ONE_MB // 8  # leaves room for names 8 x longer than these, or 8 x more jobs


def reply_bytes(names: list[str]) -> int:
    return REPLY_OVERHEAD + sum(4 + len(n.encode()) for n in names)


def job_file(path: Path, count: int) -> None:
    # Realistic name lengths (20 characters), daily schedules: the file is what the CLI parses.
    path.write_text(
        "".join(
            f'[jobs.nightly-report-{i:06d}]\nschedule = "{i % 60} {i // 60 % 24} * * *"\n'
            'command = ["true"]\n'
            for i in range(count)
        )
    )


def create_all(kazoo: KazooClient, paths: list[str], window: int = 2_000) -> None:
    """Pipelined creates (a few thousand in flight), tolerant of folders that exist."""
    for start in range(0, len(paths), window):
        pending = [kazoo.create_async(p, b"") for p in paths[start : start + window]]
        for result in pending:
            with contextlib.suppress(NodeExistsError):
                result.get(timeout=60)


def create_new(kazoo: KazooClient, paths: list[str], per_txn: int = 500) -> None:
    """Creates of folders that do not exist yet, 500 to a transaction (~30 KB), 8 in flight:
    a tenth of the time of one request each."""
    for start in range(0, len(paths), 8 * per_txn):
        pending = []
        for first in range(start, min(start + 8 * per_txn, len(paths)), per_txn):
            txn = kazoo.transaction()
            for path in paths[first : first + per_txn]:
                txn.create(path, b"")
            pending.append(txn.commit_async())
        for result in pending:
            outcomes = result.get(timeout=60)
            assert not any(isinstance(o, Exception) for o in outcomes), outcomes[:3]


def test_largest_folder_at_100k_jobs_stays_far_below_one_megabyte(
    zk_server: ZkServer, client_id: str, tmp_path: Path
) -> None:
    # A server of its own: 100k jobs' records and 200k folders do not belong in the shared
    # one that the rest of the suite (and its 256 MB heap) uses.
    started = time.monotonic()
    zk_server.start()
    zk_server.wait_serving(60)
    zk = zk_server.connect_string
    kazoo = KazooClient(hosts=zk)
    kazoo.start(timeout=30)
    try:
        check_folders(zk, client_id, kazoo, tmp_path, started)
    finally:
        kazoo.stop()
        kazoo.close()


def check_folders(
    zk: str, client_id: str, kazoo: KazooClient, tmp_path: Path, started: float
) -> None:
    jobs_toml = tmp_path / "jobs.toml"
    job_file(jobs_toml, JOBS)
    applied = run_cli(zk, client_id, "jobs", "apply", str(jobs_toml), timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert f"{JOBS} created" in applied.stdout

    paths = ClusterPaths(client_id)
    names = [f"nightly-report-{i:06d}" for i in range(JOBS)]
    kazoo.ensure_path(paths.fires)
    kazoo.ensure_path(paths.locks)
    kazoo.ensure_path(paths.triggers)
    applied_at = time.monotonic()
    # locks/<bb>/<job> is bucketed by the same hash as fires/<bb>/<job>, so its folders hold
    # the same names: creating the fire folders proves both at half the writes.
    assert all(
        paths.job_lock(n).rsplit("/", 2)[1] == paths.job_fires(n).rsplit("/", 2)[1] for n in names
    )
    buckets = sorted({paths.job_fires(n).rsplit("/", 1)[0] for n in names})
    create_all(kazoo, buckets)
    create_new(kazoo, [paths.job_fires(n) for n in names])
    created_at = time.monotonic()

    folders = [paths.base, paths.members, paths.jobs, paths.blobs, paths.fires, paths.locks]
    folders += [paths.triggers, *buckets]
    listed = {f: kazoo.get_children(f) for f in folders if kazoo.exists(f) is not None}
    sizes = {folder: reply_bytes(children) for folder, children in listed.items()}
    largest = max(sizes, key=sizes.__getitem__)
    print(
        f"\nlargest folder at {JOBS:,} jobs: {largest}: {len(listed[largest])} children, "
        f"{sizes[largest]:,} bytes listed; apply {applied_at - started:.1f} s, folders "
        f"{created_at - applied_at:.1f} s"
    )

    # every job is somewhere, in the 256 buckets of each bucketed folder
    assert len(buckets) == BUCKETS
    assert sum(len(listed[b]) for b in buckets) == JOBS
    assert len(listed[paths.blobs]) >= 16  # the table really is split into buckets
    assert sizes[largest] < WELL_UNDER, (largest, sizes[largest])

    # a command about one job reads its bucket alone, and finds it in the large table
    store = JobStore(kazoo, paths, 30.0)
    for name in (names[0], names[4242], names[-1]):
        job = store.read_job(name)
        assert job is not None and job.name == name and job.record["name"] == name
    assert store.read_job("no-such-job") is None
    shown = run_cli(zk, client_id, "jobs", "show", names[4242], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["name"] == names[4242]
    missing = run_cli(zk, client_id, "jobs", "history", "no-such-job")
    assert missing.returncode == 2 and "no job named 'no-such-job'" in missing.stderr
