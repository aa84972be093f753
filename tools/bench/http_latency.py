"""The `http` benchmark: the daemon's HTTP endpoints (/healthz /readyz /metrics /) stay
responsive while it fires a burst."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.bench.registry import BenchContext, Result, at_least, benchmark
from tools.bench.report import markdown_table, progress


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
    time until every fire is counted in /metrics. (Each prober is a process of its own:
    as threads of this process their measured latency also held this
    process's own interpreter lock, e.g. while it parsed a 200 KiB scrape.) Probes come far
    more often than in production (Kubernetes probes every 10 s, Prometheus scrapes every
    15 s) so that a burst of a few seconds yields samples for a p99: /healthz and /readyz
    every 50 ms, /metrics every 0.1 s, the status page every second."""
    import multiprocessing
    import tempfile
    import urllib.request

    from tools.zkserver import ZkServer, free_port

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
