"""The job table's bucket layout (pure parts of zksched/zk/jobstore.py)."""

from __future__ import annotations

import json

import pytest

from zksched.core.jobtable import StoredJob
from zksched.zk.jobstore import (
    MAX_BLOB_BYTES,
    MIN_BUCKETS,
    blob_id,
    bucket_index,
    choose_bucket_count,
    decode_bucket,
    encode_bucket,
    split_buckets,
)
from zksched.zk.paths import BUCKETS, ClusterPaths, bucket_of


def jobs(n: int, size: int = 200) -> dict[str, StoredJob]:
    return {
        f"job-{i:06d}": StoredJob(f"job-{i:06d}", {"pad": "x" * size}, "2026-01-01T00:00:00Z")
        for i in range(n)
    }


def test_bucket_round_trip_and_content_address() -> None:
    table = jobs(10)
    raw = encode_bucket(table)
    decoded, error = decode_bucket(raw)
    assert error is None and decoded == table
    assert blob_id(raw) == blob_id(encode_bucket(dict(reversed(table.items()))))


def test_a_bucket_its_readers_would_refuse_is_never_written() -> None:
    # one such record would make the whole bucket unreadable: every job in it lost
    for odd in (float("inf"), float("-inf"), float("nan"), "\ud800"):
        table = {**jobs(3), "bad": StoredJob("bad", {"schedule": [odd]}, "2026-01-01T00:00:00Z")}
        with pytest.raises(ValueError, match="the record of job bad holds a value JSON cannot"):
            encode_bucket(table)


def test_a_malformed_bucket_is_reported_not_raised() -> None:
    for raw in (b"\xff", b"[]", b'{"jobs": 3}', b"{"):
        decoded, error = decode_bucket(raw)
        assert decoded == {} and error


def test_bucket_count_keeps_every_blob_under_the_limit_at_100k_jobs() -> None:
    table = jobs(100_000, size=150)
    count = choose_bucket_count(table, 0)
    assert count >= MIN_BUCKETS and count & (count - 1) == 0
    sizes = [len(encode_bucket(b)) for b in split_buckets(table, count)]
    assert max(sizes) <= MAX_BLOB_BYTES
    root = json.dumps({"buckets": ["x" * 24] * count}).encode()
    assert len(root) < 200_000


def test_bucket_count_is_stable_for_small_changes() -> None:
    table = jobs(1_000)
    count = choose_bucket_count(table, 0)
    table.pop("job-000001")
    assert choose_bucket_count(table, count) == count


def test_one_change_touches_one_bucket() -> None:
    table = jobs(2_000)
    count = choose_bucket_count(table, 0)
    before = [blob_id(encode_bucket(b)) for b in split_buckets(table, count)]
    table["job-000007"] = StoredJob("job-000007", {"pad": "changed"}, "2026-01-02T00:00:00Z")
    after = [blob_id(encode_bucket(b)) for b in split_buckets(table, count)]
    assert sum(a != b for a, b in zip(before, after, strict=True)) == 1
    assert before[bucket_index("job-000007", count)] != after[bucket_index("job-000007", count)]


def test_fire_and_lock_folders_are_bucketed() -> None:
    paths = ClusterPaths("c1")
    assert paths.fire("nightly", "2026-01-02T02:00:00Z") == (
        f"/zksched/c1/fires/{bucket_of('nightly')}/nightly/2026-01-02T02:00:00Z"
    )
    assert paths.job_lock("nightly") == f"/zksched/c1/locks/{bucket_of('nightly')}/nightly"
    # 100,000 jobs spread over 256 folders: the fullest stays far below 1 MB of names.
    counts = [0] * BUCKETS
    for i in range(100_000):
        counts[int(bucket_of(f"job-{i}"), 16)] += 1
    assert max(counts) * 140 < 1_000_000  # 128-char names + framing, worst case
