"""The project's benchmarks, one entry point: `scripts/bench [--quick] [--out DIR] NAME`.

Each benchmark is one function registered with `@benchmark(...)`: it gets a `BenchContext`,
prints a human-readable table on stdout, and returns a JSON-able dict that `main` writes to
`<out>/<name>-<UTC timestamp>.json` together with the machine it ran on, so numbers from
different runs and hosts can be compared later. `--quick` asks every benchmark for small
sizes that finish in seconds (CI runs every benchmark with `--quick` as a smoke test, in
integration/test_bench_quick.py).

Results and docs: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import hashlib
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from zksched.core.names import is_valid_name
from zksched.core.owners import Member, OwnerTable

Result = dict[str, Any]


@dataclass(frozen=True)
class BenchContext:
    """What every benchmark gets: the global flags and its own parsed arguments."""

    quick: bool
    out_dir: Path
    args: argparse.Namespace


@dataclass(frozen=True)
class Benchmark:
    name: str
    help: str
    run: Callable[[BenchContext], Result]
    add_arguments: Callable[[argparse.ArgumentParser], None]


BENCHMARKS: dict[str, Benchmark] = {}


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def benchmark(
    name: str,
    help: str,
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments,
) -> Callable[[Callable[[BenchContext], Result]], Callable[[BenchContext], Result]]:
    """Register a benchmark as a subcommand; adding one is one decorated function."""

    def register(run: Callable[[BenchContext], Result]) -> Callable[[BenchContext], Result]:
        BENCHMARKS[name] = Benchmark(name, help, run, arguments)
        return run

    return register


def progress(message: str) -> None:
    # stderr, so that stdout carries only the result table and can be pasted into docs.
    print(message, file=sys.stderr, flush=True)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


# --- owners: rendezvous hashing vs. a consistent-hash ring -----------------------------------

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


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= minimum, refused with a usage error otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def _owners_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs", type=at_least(1), nargs="+", metavar="N", help="job counts (default 10000 100000)"
    )
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


# --- http: the daemon's endpoint stays responsive while it fires a burst --------------------


def _http_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs", type=at_least(1), default=None, metavar="N", help="jobs due at once (2000)"
    )
    parser.add_argument(
        "--zk", default=None, help="ZooKeeper connect string (default: start a local server)"
    )
    parser.add_argument(
        "--probe-interval",
        type=float,
        default=0.05,
        metavar="S",
        help="pause between /healthz (and /readyz) requests (0.05; /metrics 0.1 s, / 1 s)",
    )


@benchmark(
    "http",
    help="HTTP endpoint latency (/healthz /readyz /metrics /) while a daemon fires a burst",
    arguments=_http_arguments,
)
def bench_http(ctx: BenchContext) -> Result:
    """One `zksched run --http` subprocess owns N jobs that all fall due at the same second
    (command /bin/true). One prober process per endpoint requests it in a loop, as
    Prometheus or a load balancer would, before the burst (idle) and from the burst's due
    time until every fire is counted in /metrics. (Each prober is a process of its own
    since session 4: as threads of this process their measured latency also held this
    process's own interpreter lock, e.g. while it parsed a 200 KiB scrape.) Probes come far
    more often than in production (Kubernetes probes every 10 s, Prometheus scrapes every
    15 s) so that a burst of a few seconds yields samples for a p99: /healthz and /readyz
    every 50 ms, /metrics every 0.1 s, the status page every second."""
    import multiprocessing
    import tempfile
    import urllib.request

    from zksched.devtools.zkserver import ZkServer, free_port

    n_jobs: int = ctx.args.jobs or (200 if ctx.quick else 2000)
    intervals = {"/healthz": ctx.args.probe_interval, "/readyz": ctx.args.probe_interval}
    # /metrics 10 times a second (Prometheus: every 15 s), so that a few runs pool into
    # over a hundred burst samples (a p99 of fewer is just the slowest one)
    intervals.update({"/metrics": 0.1, "/": 1.0})
    endpoints = tuple(intervals)
    workdir = Path(tempfile.mkdtemp(prefix="zksched-bench-http-"))
    server = None
    hosts = ctx.args.zk
    if hosts is None:
        server = ZkServer(workdir / "zk")
        server.start()
        server.wait_serving(60)
        hosts = server.connect_string
    client_id = f"bench-http-{os.getpid()}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "zksched", "--zk", hosts, "--client-id", client_id]
    daemon = subprocess.Popen(
        [*cli, "--log-level", "warning", "run", "--http", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "daemon.log", "wb"),  # noqa: SIM115 (owned by the child)
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )

    def get(path: str) -> tuple[float, bytes]:
        started = time.perf_counter()
        with urllib.request.urlopen(base + path, timeout=30) as response:
            body: bytes = response.read()
        return time.perf_counter() - started, body

    def fired() -> float:
        """Fires counted in a scrape of this process's own (not a measured one)."""
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in get("/metrics")[1].decode().splitlines()
            if line.startswith("zksched_fires_total{")
        )

    def summary(latencies: list[float]) -> Result:
        ordered = sorted(latencies)
        if not ordered:  # a short --quick burst may fall between two requests of a prober
            return {"requests": 0, "p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}

        def pct(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

        return {
            "requests": len(ordered),
            "p50_ms": round(pct(0.50), 2),
            "p90_ms": round(pct(0.90), 2),
            "p99_ms": round(pct(0.99), 2),
            "max_ms": round(ordered[-1] * 1000, 2),
        }

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if get("/readyz")[0] >= 0:
                    break
            except OSError:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError(f"daemon not ready; see {workdir / 'daemon.log'}") from None
                time.sleep(0.2)
        due = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=25)
        schedule = f"{due.second} {due.minute} {due.hour} * * *"
        job_file = workdir / "jobs.toml"
        job_file.write_text(
            "".join(
                f'[jobs.burst-{i:05d}]\nschedule = "{schedule}"\ncommand = ["/bin/true"]\n'
                for i in range(n_jobs)
            )
        )
        subprocess.run([*cli, "jobs", "apply", str(job_file)], check=True, capture_output=True)
        progress(f"http: {n_jobs} jobs due at {due:%H:%M:%S}Z; probing idle first")
        while get("/metrics")[1].count(b"zksched_owned_jobs " + str(n_jobs).encode()) == 0:
            if time.time() > due.timestamp() - 12:
                raise RuntimeError("the daemon did not take the jobs over in time")
            time.sleep(0.5)
        load_before = os.getloadavg()
        spawn = multiprocessing.get_context("spawn")
        stop = spawn.Event()
        found = spawn.Queue()
        probers = [
            spawn.Process(target=_http_prober, args=(base, p, intervals[p], stop, found))
            for p in endpoints
        ]
        for prober in probers:
            prober.start()
        # the probers' own start (4 interpreters on 2 cores) is not the daemon's latency
        idle_from = time.time() + 3
        time.sleep(max(0.0, due.timestamp() - time.time()))
        burst_started = time.time()
        while (total := fired()) < n_jobs and time.time() - burst_started < 300:
            time.sleep(0.25)
        burst_s = time.time() - burst_started
        stop.set()
        samples: dict[str, list[tuple[float, float, str]]] = dict(
            found.get(timeout=60) for _ in probers
        )
        for prober in probers:
            prober.join(10)
        load_after = os.getloadavg()
        # idle: from 3 s after the probers started until 2 s before the instant; burst: from
        # the instant until all were counted
        idle_window = (idle_from, due.timestamp() - 2)
        burst_window = (burst_started, burst_started + burst_s)
        idle = {
            p: [lat for at, lat, _ in got if idle_window[0] <= at < idle_window[1]]
            for p, got in samples.items()
        }
        burst = {
            p: [lat for at, lat, _ in got if burst_window[0] <= at <= burst_window[1]]
            for p, got in samples.items()
        }
        # /metrics and / answered by the daemon itself (no copy recent enough), per window
        relayed = {
            window: {
                p: sum(1 for at, _, served in got if lo <= at <= hi and served == "daemon")
                for p, got in samples.items()
                if p in ("/metrics", "/")
            }
            for window, (lo, hi) in (("idle", idle_window), ("burst", burst_window))
        }
        progress(f"http: {total:.0f} fires counted in {burst_s:.1f} s")
        _, page = get("/")
    finally:
        daemon.terminate()
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        if server is not None:
            server.stop(kill=True)

    rows = {p: {"idle": summary(idle[p]), "burst": summary(burst[p])} for p in endpoints}
    header = ["endpoint", "idle p50", "idle p99", "burst requests", "p50", "p90", "p99", "max"]
    table_rows = [
        [
            p,
            f"{r['idle']['p50_ms']:.1f} ms",
            f"{r['idle']['p99_ms']:.1f} ms",
            str(r["burst"]["requests"]),
            f"{r['burst']['p50_ms']:.1f} ms",
            f"{r['burst']['p90_ms']:.1f} ms",
            f"{r['burst']['p99_ms']:.1f} ms",
            f"{r['burst']['max_ms']:.1f} ms",
        ]
        for p, r in rows.items()
    ]
    print(markdown_table(header, table_rows))
    print(
        f"\n{n_jobs} jobs due at one instant; {total:.0f} fires counted in {burst_s:.1f} s; "
        f"status page {len(page) / 1024:.0f} KiB. Load average (1 min) before the burst "
        f"{load_before[0]:.1f}, after it {load_after[0]:.1f}, on {os.cpu_count()} CPUs."
    )
    print(f"Answered by the daemon itself (no recent copy): {relayed}")
    return {
        "method": {
            "daemon": "zksched run --http (subprocess), default concurrency 32",
            "jobs": f"{n_jobs} jobs, command /bin/true, all due at the same second",
            "probers": f"one process per endpoint, sequential GETs, pauses {intervals}",
            "burst": "from the due instant until /metrics counts every fire",
        },
        "jobs": n_jobs,
        "burst_s": round(burst_s, 2),
        "fires_counted": total,
        "page_bytes": len(page),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "endpoints": rows,
        "relayed_to_the_daemon": relayed,
        # every burst latency, to pool runs: a run's p99 of ~50 samples is its slowest one
        "burst_samples_ms": {p: [round(v * 1000, 2) for v in burst[p]] for p in endpoints},
    }


def _http_prober(base: str, path: str, interval: float, stop: Any, found: Any) -> None:
    """One prober (a process of its own): GET `path` every `interval` seconds until `stop`
    is set, then put (path, [(request start as epoch seconds, latency in seconds, where the
    answer came from: "copy", "daemon" or "")]) on `found`. An error counts as an infinite
    latency."""
    import urllib.request

    samples: list[tuple[float, float, str]] = []
    while not stop.is_set():
        at, started = time.time(), time.perf_counter()
        served = ""
        try:
            with urllib.request.urlopen(base + path, timeout=30) as response:
                response.read()
                served = response.headers.get("X-Zksched-Served", "")
            latency = time.perf_counter() - started
        except Exception:  # refused, reset, cut short (IncompleteRead): the worst latency
            latency = float("inf")
        samples.append((at, latency, served))
        time.sleep(interval)
    found.put((path, samples))


# --- driver -------------------------------------------------------------------------------


def machine() -> Result:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "mmh3": _version("mmh3"),
        "zksched": _version("zksched"),
        "git_commit": _git_commit(),
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    # Which code produced the numbers; absent outside a checkout, which is fine.
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    # The global flags are also accepted after the subcommand (`bench owners --quick`). Only
    # the top-level parser has real defaults: a subparser's default would overwrite a value
    # given before the subcommand, so there they are SUPPRESSed. (Not argparse `parents=`:
    # those share Action objects, and set_defaults on one parser would change the other.)
    parser.add_argument(
        "--quick",
        action="store_true",
        default=False if defaults else argparse.SUPPRESS,
        help="small sizes that finish in a few seconds (CI smoke run)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench-results") if defaults else argparse.SUPPRESS,
        metavar="DIR",
        help="directory for the JSON results (default: bench-results/)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="zksched benchmarks; results are printed and saved as JSON.",
    )
    _add_global_options(parser, defaults=True)
    subparsers = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for bench in BENCHMARKS.values():
        sub = subparsers.add_parser(bench.name, help=bench.help, description=bench.help)
        _add_global_options(sub, defaults=False)
        bench.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bench = BENCHMARKS[args.benchmark]
    ctx = BenchContext(quick=args.quick, out_dir=args.out, args=args)
    started = dt.datetime.now(dt.UTC)
    results = bench.run(ctx)
    record = {
        "benchmark": bench.name,
        "timestamp": started.isoformat(timespec="seconds"),
        "duration_s": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 3),
        "quick": ctx.quick,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "machine": machine(),
        "results": results,
    }
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{bench.name}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    path = ctx.out_dir / f"{stem}.json"
    for n in itertools.count(2):  # two runs within one second must not overwrite each other
        if not path.exists():
            break
        path = ctx.out_dir / f"{stem}-{n}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    progress(f"results written to {path}")
    return 0


# The cluster benchmarks register themselves into BENCHMARKS (they import this module).
from zksched.devtools import bench_cluster as _bench_cluster  # noqa: E402,F401

if __name__ == "__main__":
    # Run as `python -m`, this file is `__main__`, a second copy of the module: dispatch to
    # the imported one, whose registry the cluster benchmarks filled.
    from zksched.devtools.bench import main as registered_main

    sys.exit(registered_main())
