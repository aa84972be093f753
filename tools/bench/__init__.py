"""The project's benchmarks, one entry point: `scripts/bench [--quick] [--out DIR] NAME`.

Each benchmark is one function registered with `@benchmark(...)` (`registry`): it gets a
`BenchContext`, prints a human-readable table on stdout, and returns a JSON-able dict that
`cli.main` writes to `<out>/<name>-<UTC timestamp>.json` together with the machine it ran on
(`machine`), so numbers from different runs and hosts can be compared later. `--quick` asks
every benchmark for small sizes that finish in seconds (CI runs every benchmark with `--quick`
as a smoke test, in integration/test_bench_quick.py).

One module per benchmark family:

    owners       the owner table: balance, jobs moved on join/leave, lookup cost (vs. an md5 ring)
    http_latency the daemon's HTTP endpoints while it fires a burst (`http`)
    fire_delay   scheduled instant -> command start, zksched members vs. APScheduler 3
    failover     SIGKILL / SIGTERM of a probe job's owner: time to its next fire, lost instants
    zk_requests  ZooKeeper requests per fire by type, with 1, 3 and 5 members
    scale        10k / 100k jobs: apply, ready, RSS, idle CPU, a burst of 2,000 at one instant
    fire_profile where the time on the fire path goes (`profile`: phases, cProfile)
    spawn_floor  the machine's own limit for a burst: `true`s started by plain Python loops
    functions    function jobs in apps (zksched.Cluster) vs APScheduler 3; requests; throughput
    members      membership changes among many members: light ones in one helper process
                 (light_members), full daemons measured (members_rig: ZooKeeper, the helper,
                 the benchmark's own owner table; members_rolling: a rolling restart)
    job_memory   what a daemon holds per job, structure by structure (`job-memory`: in this
                 process, tracemalloc; RSS in a fresh one; no ZooKeeper)

The cluster benchmarks (fire-delay to spawn-floor) start their own ZooKeeper and members
through `cluster`; their members are `zksched run` subprocesses logging JSON (their `fire`
events carry scheduled, claimed, started and finished timestamps), except where a measurement
must be taken inside the member (request counting, profiling): those run `Daemon`s in this
process. `burst` measures one burst due at one instant against the spawn floor (for `scale`
and `spawn-floor`); `report` has the progress line, the Markdown table and the percentiles.

Results and docs: docs/benchmarks.md.
"""
