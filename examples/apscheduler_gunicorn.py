"""APScheduler in every gunicorn worker, each run time run once across them.

This file is both the gunicorn config (`-c python:examples.apscheduler_gunicorn`) and the
WSGI app (`examples.apscheduler_gunicorn:app`). Each worker, after the fork, joins the
zksched cluster and starts the same BackgroundScheduler with a `ClusterExecutor`: every
worker's scheduler fires every job, and the executor runs a run time only in the worker
that claimed it. From the repository's root:

    scripts/zookeeper start
    APS_RUNS=/tmp/aps-runs.log python3 -m gunicorn -w 4 -b 127.0.0.1:8000 \\
        -c python:examples.apscheduler_gunicorn examples.apscheduler_gunicorn:app
    tail -f /tmp/aps-runs.log     # "<job id> <scheduled run time> <pid>": one line a run time
    curl 127.0.0.1:8000/          # the worker that answered and its scheduler's next runs

Environment: ZKSCHED_ZK (default 127.0.0.1:2181), ZKSCHED_CLIENT_ID (default
example-aps), APS_RUNS (the file the jobs append to; default aps-runs.log).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

from zksched import Cluster
from zksched.integrations.apscheduler import ClusterExecutor, current_claim

# gunicorn settings (the other names here are not settings: gunicorn ignores them)
workers = 4
loglevel = "info"

# An interval trigger counts from its start_date: a fixed one gives every worker the same run
# times (without it, each worker would count from its own start and claim instants of its own).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

# This worker's cluster member and scheduler, made by post_fork. This module is imported once,
# in the master, as the config; forked workers inherit it, so `app` sees the same globals.
cluster: Cluster | None = None
scheduler: BackgroundScheduler | None = None

log = logging.getLogger("example.apscheduler")


def record(job_id: str) -> None:
    """The jobs' work: append `<job id> <scheduled run time> <pid>` to $APS_RUNS."""
    claim = current_claim()  # the claim this run was started for (key, UTC run time, token)
    scheduled = claim.scheduled.strftime("%Y-%m-%dT%H:%M:%SZ") if claim else "unclaimed"
    line = f"{job_id} {scheduled} {os.getpid()}\n".encode()
    # one O_APPEND write a line: the workers' lines never interleave
    fd = os.open(os.environ.get("APS_RUNS", "aps-runs.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def post_fork(server: Any, worker: Any) -> None:
    """gunicorn calls this in each worker right after the fork. The Cluster and scheduler are
    made here, never in the master before the fork: a ZooKeeper session and the scheduler's
    threads do not survive a fork (the children would share one socket and have no timer
    thread), and a member id is `<host>-<pid>` of the process that runs it."""
    global cluster, scheduler
    cluster = Cluster(
        zk=os.environ.get("ZKSCHED_ZK", "127.0.0.1:2181"),
        client_id=os.environ.get("ZKSCHED_CLIENT_ID", "example-aps"),
        session_timeout=5,
    )
    cluster.start()
    scheduler = BackgroundScheduler(
        executors={"default": ClusterExecutor(cluster, max_workers=4)},
        # a run time may wait for a busy worker for a while and still run (once)
        job_defaults={"misfire_grace_time": 30, "coalesce": True},
        timezone=UTC,
    )
    # ids are the claims' names: the same in every worker (never APScheduler's random ones)
    scheduler.add_job(record, "cron", second="*", id="tick", args=["tick"])
    scheduler.add_job(
        record, "interval", seconds=3, start_date=EPOCH, id="every-3s", args=["every-3s"]
    )
    scheduler.start()
    log.info("worker %s: member %s, scheduler started", worker.pid, cluster.member_id)


def worker_exit(server: Any, worker: Any) -> None:
    """gunicorn calls this when a worker exits gracefully (its SIGTERM handling; gunicorn's
    own signal handlers replace any installed in post_fork). Stop the timer first (nothing
    new is claimed), let runs under way end and record their results, then leave the
    cluster: the ClusterExecutor's shutdown stops the Cluster, so the other workers take
    this one's run times and leadership at once."""
    if scheduler is not None:
        scheduler.shutdown(wait=True)
    elif cluster is not None:
        cluster.stop()


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """A plain WSGI app: which worker answered, and what its scheduler runs next."""
    jobs = scheduler.get_jobs() if scheduler is not None else []
    lines = [f"worker {os.getpid()}, member {cluster.member_id if cluster else '-'}"]
    lines += [f"{job.id}: next run {job.next_run_time}" for job in jobs]
    body = ("\n".join(lines) + "\n").encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
