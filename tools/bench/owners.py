"""The `owners` benchmark: rendezvous hashing (the owner table) vs. a consistent-hash ring:
balance, jobs moved on a join or a leave, and the cost of placing every job."""

from __future__ import annotations

import argparse
import bisect
import hashlib
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from tools.bench.registry import BenchContext, Result, at_least, benchmark, job_counts
from tools.bench.report import markdown_table, progress
from zksched.core.members import Member
from zksched.core.names import is_valid_name
from zksched.core.owners import OwnerTable

# Shapes of real job names (SPEC.md's name rule allows dots, dashes and underscores), so the
# hash is measured on the inputs it meets rather than on one uniform pattern. `job-NNNNN`
# is listed twice: generated names are the most common shape in big job files.
_JOB_SHAPES = (
    "job-{i:05d}",
    "backup.db-{i}",
    "report.daily-eu-{i}",
    "sync_users-{i}",
    "job-{i:05d}",
    "cleanup.tmp.{i}",
    "invoice-run_{i}",
)


def job_names(count: int) -> list[str]:
    names = [_JOB_SHAPES[i % len(_JOB_SHAPES)].format(i=i) for i in range(count)]
    # One name of each shape is enough to keep the shapes within the real name rule.
    invalid = [n for n in names[: len(_JOB_SHAPES)] if not is_valid_name(n)]
    if invalid:
        raise ValueError(f"benchmark job names break the name rule: {invalid}")
    return names


def member_id(index: int) -> str:
    """A member id as `zksched run` makes it: `<hostname>-<pid>`."""
    pid = 1000 + (index * 7919) % 60000  # spread like real pids, but reproducible
    return f"sched-{index:02d}.dc{1 + index % 3}.example.net-{pid}"


def _md5_position(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode()).digest())


class Md5Ring:
    """A consistent-hash ring with `points` md5 positions per member, for comparison.

    This is the scheme of tooz's HashRing at its default of 32 partitions per node; a small
    independent implementation (not tooz's code): a job belongs to the first member position
    at or after md5(job), wrapping around.
    """

    def __init__(self, member_ids: Sequence[str], points: int = 32) -> None:
        ring = {_md5_position(f"{m}#{p}"): m for m in member_ids for p in range(points)}
        self._positions = sorted(ring)
        self._owners = [ring[p] for p in self._positions]

    def owner(self, job: str) -> str:
        i = bisect.bisect_left(self._positions, _md5_position(job))
        return self._owners[i % len(self._owners)]

    def assign(self, jobs: Sequence[str]) -> dict[str, str]:
        return {job: self.owner(job) for job in jobs}


@dataclass
class Distribution:
    """Balance and movement of one placement scheme for one (jobs, members) size."""

    busiest: float  # largest share ÷ mean share
    least: float  # smallest share ÷ mean share
    join_moved: float  # fraction of all jobs that changed owner when one member joined
    leave_moved: float  # ... when one member left
    stray_moves: int  # moves between two members that both stayed: must be 0
    us_per_job: float  # median wall time to build the table and place every job, per job
    timings_s: list[float] = field(default_factory=list)


def _measure(
    assign: Callable[[Sequence[str]], Mapping[str, str | None]],
    jobs: Sequence[str],
    ids: Sequence[str],
    newcomer: str,
    leaver: str,
    repeat: int,
) -> Distribution:
    """`assign(member ids)` must build a fresh table and place every job; it is timed."""
    timings: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        base = assign(ids)
        timings.append(time.perf_counter() - started)
    joined = assign([*ids, newcomer])
    left = assign([m for m in ids if m != leaver])

    counts = Counter(base.values())
    shares = [counts.get(m, 0) for m in ids]  # a member with no job at all counts as 0
    mean = len(jobs) / len(ids)
    stray = 0
    join_moved = leave_moved = 0
    for job in jobs:
        if joined[job] != base[job]:
            join_moved += 1
            stray += joined[job] != newcomer
        if left[job] != base[job]:
            leave_moved += 1
            stray += base[job] != leaver
    return Distribution(
        busiest=max(shares) / mean,
        least=min(shares) / mean,
        join_moved=join_moved / len(jobs),
        leave_moved=leave_moved / len(jobs),
        stray_moves=stray,
        us_per_job=statistics.median(timings) / len(jobs) * 1e6,
        timings_s=timings,
    )


def _rendezvous(
    required: Mapping[str, Mapping[str, str]], member_ids: Sequence[str]
) -> Mapping[str, str | None]:
    # Members as the reader builds them from znodes, so de-duplication is part of the cost.
    members = (Member(m, znode=f"{m}.{i:010d}") for i, m in enumerate(member_ids))
    return OwnerTable(members).assign(required)


def _ring(jobs: Sequence[str], member_ids: Sequence[str]) -> Mapping[str, str | None]:
    return Md5Ring(member_ids).assign(jobs)


def _owners_arguments(parser: argparse.ArgumentParser) -> None:
    job_counts(parser, "10000 100000")
    # At least 2 members: the leave measurement needs someone left to take the jobs over.
    parser.add_argument(
        "--members",
        type=at_least(2),
        nargs="+",
        metavar="N",
        help="member counts (default 3 5 10 50)",
    )
    parser.add_argument(
        "--repeat", type=at_least(1), default=3, metavar="N", help="timed repetitions (median; 3)"
    )


@benchmark(
    "owners",
    help="owner table: balance, jobs moved on join/leave, lookup cost (vs. an md5 ring)",
    arguments=_owners_arguments,
)
def bench_owners(ctx: BenchContext) -> Result:
    job_counts: list[int] = ctx.args.jobs or ([2_000] if ctx.quick else [10_000, 100_000])
    member_counts: list[int] = ctx.args.members or ([3, 5] if ctx.quick else [3, 5, 10, 50])
    repeat: int = ctx.args.repeat

    rows: list[Result] = []
    for n_jobs in job_counts:
        jobs = job_names(n_jobs)
        # Jobs without label requirements: labels only shrink the candidate list, which is
        # the same computation with fewer members.
        required: dict[str, Mapping[str, str]] = {job: {} for job in jobs}
        for n_members in member_counts:
            started = time.perf_counter()
            ids = [member_id(i) for i in range(n_members)]
            newcomer, leaver = member_id(n_members), ids[n_members // 2]
            rows.append(
                {
                    "jobs": n_jobs,
                    "members": n_members,
                    "ideal_join_moved": 1 / (n_members + 1),
                    "ideal_leave_moved": 1 / n_members,
                    "rendezvous": vars(
                        _measure(
                            partial(_rendezvous, required), jobs, ids, newcomer, leaver, repeat
                        )
                    ),
                    "md5_ring_32": vars(
                        _measure(partial(_ring, jobs), jobs, ids, newcomer, leaver, repeat)
                    ),
                }
            )
            elapsed = time.perf_counter() - started
            rows[-1]["duration_s"] = round(elapsed, 3)
            progress(f"owners: {n_jobs} jobs x {n_members} members: {elapsed:.1f} s")

    header = [
        "jobs",
        "members",
        "busiest/mean",
        "least/mean",
        "join moved (ideal)",
        "leave moved (ideal)",
        "µs/job",
        "ring busiest/mean",
        "ring least/mean",
        "ring join moved",
        "ring leave moved",
        "ring µs/job",
    ]
    table_rows = []
    for row in rows:
        hrw, ring_ = row["rendezvous"], row["md5_ring_32"]
        table_rows.append(
            [
                f"{row['jobs']:,}",
                str(row["members"]),
                f"{hrw['busiest']:.3f}",
                f"{hrw['least']:.3f}",
                f"{hrw['join_moved']:.2%} ({row['ideal_join_moved']:.2%})",
                f"{hrw['leave_moved']:.2%} ({row['ideal_leave_moved']:.2%})",
                f"{hrw['us_per_job']:.2f}",
                f"{ring_['busiest']:.3f}",
                f"{ring_['least']:.3f}",
                f"{ring_['join_moved']:.2%}",
                f"{ring_['leave_moved']:.2%}",
                f"{ring_['us_per_job']:.2f}",
            ]
        )
    print(markdown_table(header, table_rows))
    strays = {
        scheme: sum(r[scheme]["stray_moves"] for r in rows)
        for scheme in ("rendezvous", "md5_ring_32")
    }
    print(
        f"\nJobs moved between two members that both stayed: rendezvous {strays['rendezvous']}, "
        f"ring {strays['md5_ring_32']} (must be 0)."
    )
    return {
        "method": {
            "rendezvous": "zksched.core.owners.OwnerTable (mmh3 hash128, highest weight wins)",
            "md5_ring_32": "consistent-hash ring, 32 md5 points per member (tooz's default)",
            "join": "one new member added",
            "leave": "the member at index members//2 removed",
            "us_per_job": f"median of {repeat} runs: build a fresh table + place every job",
        },
        "rows": rows,
    }
