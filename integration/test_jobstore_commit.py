"""The job table's first commit, against a real ZooKeeper: making the blobs folder makes the
table's root node (its parent), empty; the commit writes the table there in one go, and a
table another writer committed meanwhile is still a concurrent change."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from zksched.core.jobtable import StoredJob
from zksched.zk.jobstore import ConcurrentChange, JobStore
from zksched.zk.paths import ClusterPaths

RECORD = {"format": 1, "schedule": "@hourly", "command": ["/bin/true"]}


def table(*names: str) -> dict[str, StoredJob]:
    return {n: StoredJob(n, RECORD, "2026-01-01T00:00:00Z") for n in names}


def test_the_first_commit_of_a_new_cluster_writes_once(client_id: str, kazoo: KazooClient) -> None:
    paths = ClusterPaths(client_id)
    store = JobStore(kazoo, paths, 5.0)
    absent = store.read_root()
    assert absent.version < 0 and kazoo.exists(paths.jobs) is None
    root = store.commit(absent, table("a", "b"))  # raised ConcurrentChange before
    assert root.generation == 1 and any(root.buckets)
    assert JobStore(kazoo, paths, 5.0).read_table(whole=True)[1] == table("a", "b")


def test_a_table_committed_since_the_read_is_a_concurrent_change(
    client_id: str, kazoo: KazooClient
) -> None:
    paths = ClusterPaths(client_id)
    ours, theirs = JobStore(kazoo, paths, 5.0), JobStore(kazoo, paths, 5.0)
    absent = ours.read_root()
    theirs.commit(theirs.read_root(), table("theirs"))
    with pytest.raises(ConcurrentChange):
        ours.commit(absent, table("ours"))
    assert ours.read_table(whole=True)[1] == table("theirs")


def test_an_empty_root_left_by_a_folder_is_still_an_absent_table(
    client_id: str, kazoo: KazooClient
) -> None:
    """A root node made empty (by an earlier apply that stopped after making the blobs
    folder) reads as no table, and a commit from either reading succeeds."""
    paths = ClusterPaths(client_id)
    kazoo.ensure_path(paths.blobs)
    store = JobStore(kazoo, paths, 5.0)
    empty = store.read_root()
    assert empty.version == 0 and empty.buckets == ()
    store.commit(empty, table("a"))
    assert store.read_table(whole=True)[1] == table("a")
