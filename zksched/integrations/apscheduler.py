"""APScheduler 3 on N processes, each run time once: `ClusterExecutor`.

Every process (gunicorn worker, pod) runs the same `BackgroundScheduler` with the same jobs,
and its executor is a `ClusterExecutor` on that process's `zksched.Cluster`:

    cluster = Cluster(zk="127.0.0.1:2181", client_id="web")
    cluster.start()
    scheduler = BackgroundScheduler(executors={"default": ClusterExecutor(cluster)})
    scheduler.add_job(report, "cron", second="*/10", id="report")
    scheduler.start()

Each scheduler decides its jobs' run times as usual (triggers, misfire grace, coalescing);
the executor then claims each run time (`cluster.claim(job id, run time)`) and submits only
the run times it won, so one process runs each (job, run time) and the others skip it. When
a run ends, `cluster.finish` records ok, or failed with the exception's type and message.
In a job function, `current_claim()` is the run's claim: its `key` (`job@2026-01-02T02:00:00Z`,
the same on every process) is an idempotency key, its `scheduled` the UTC run time.

Rules, and why:
- Job ids are the claims' names, so every process must give a job the same id (`id=` in
  `add_job`): APScheduler's generated ids are random per process, and each process would
  then claim names of its own and run every run time. Ids that look generated (32 hex
  digits) are warned about once. An id that is not a valid zksched name is an error logged
  once per job, and its run times are skipped: running them unclaimed would run them N
  times. `prefix` is prepended to every id (e.g. "aps.") to keep the claims apart from jobs
  of the cluster's job table, whose fire records share the same folder.
- Run times are the claims' instants, taken to the second in UTC: triggers must give every
  process the same run times. Cron and date triggers do; an interval trigger does only with
  a fixed `start_date` (without one each process counts from its own start).
- Not connected to ZooKeeper (or the Cluster not started): nothing runs here; the skip is
  logged once per outage, not once per run time. A claim that cannot be decided is never
  run (the Coordinator settles its record as skipped).
- A run time already past the job's misfire grace when submitted is not claimed (it would
  be skipped as missed anyway); one that becomes late while it waits for a pool thread is
  missed by APScheduler and finished as `error` ("missed ...").
- A job at its `max_instances` on this process is refused before any claim, so another
  process can claim the run time (APScheduler logs its usual "maximum number of running
  instances reached").
- `scheduler.shutdown()` stops the Cluster too, after the runs under way have ended and
  recorded their results (`stop_cluster=False` keeps it running): the other processes then
  take this one's run times and leadership at once, not after its session timeout.
- At most once: a process that dies between a claim and the run's end loses that run time
  (its record stays `running`; `zksched audit` counts such records for jobs of the job
  table only). Names claimed here are not jobs of the table: their records are shown by
  `zksched jobs history --claims NAME` (docs/library.md).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from apscheduler.events import (  # type: ignore[import-untyped]
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MISSED,
    JobExecutionEvent,
)
from apscheduler.executors.base import MaxInstancesReachedError, run_job  # type: ignore[import-untyped]
from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-untyped]
from apscheduler.job import Job  # type: ignore[import-untyped]

from zksched import AppClaim, ClaimStatus, Cluster, claim_instant, name_problem

log = logging.getLogger("zksched.integrations.apscheduler")

GENERATED_ID = re.compile(r"[0-9a-f]{32}")  # what APScheduler's add_job(id=None) makes

_current = threading.local()  # the claim of the run in progress on this pool thread


def current_claim() -> AppClaim | None:
    """In a job function run by a ClusterExecutor: the claim of the run time it runs for
    (its `key` is an idempotency key the same on every process, `scheduled` the UTC
    instant, `fencing_token` grows with every claim of the name). None elsewhere."""
    claim: AppClaim | None = getattr(_current, "claim", None)
    return claim


def run_result(event: JobExecutionEvent) -> tuple[ClaimStatus, str | None]:
    """How an APScheduler run event is recorded: (status, error text)."""
    if event.code == EVENT_JOB_EXECUTED:
        return "ok", None
    if event.code == EVENT_JOB_ERROR:
        exc = event.exception
        return "failed", f"raised {type(exc).__name__}: {exc}"
    if event.code == EVENT_JOB_MISSED:
        return "error", "missed: the run time passed its misfire_grace_time before it started"
    return "error", f"ended with APScheduler event code {event.code}"


def within_grace(run_time: datetime, grace: float | None, now: datetime) -> bool:
    """APScheduler's own misfire rule (run_job's), applied before claiming."""
    return grace is None or now - run_time <= timedelta(seconds=grace)


class ClusterExecutor(ThreadPoolExecutor):  # type: ignore[misc]
    """A thread pool executor that runs a (job, run time) only where the claim was won."""

    def __init__(
        self,
        cluster: Cluster,
        max_workers: int = 10,
        pool_kwargs: dict[str, Any] | None = None,
        prefix: str = "",
        stop_cluster: bool = True,
    ) -> None:
        """`stop_cluster`: whether the scheduler's shutdown stops `cluster` too (after the
        runs under way have ended and recorded their results), so that the other processes
        take its run times and its leadership at once; False when the Cluster lives on
        after the scheduler (it runs function jobs of its own, or another scheduler uses
        it)."""
        super().__init__(max_workers, pool_kwargs)
        self.cluster = cluster
        self.prefix = prefix
        self.stop_cluster = stop_cluster
        self._said: set[tuple[str, str]] = set()  # (job id, problem) logged once each
        self._said_lock = threading.Lock()
        self._outage = False  # a "not connected" skip was logged; reset once claims resume

    # -- the claim side (the scheduler's thread) ------------------------------------------

    def claim_name(self, job_id: str) -> str | None:
        """The claims' name of job `job_id`, or None (logged once) when it is not valid."""
        name = self.prefix + str(job_id)
        problem = name_problem(name, "claim name")
        if problem is not None:
            self._once(
                job_id,
                "bad-name",
                logging.ERROR,
                "APScheduler job %r is not run by this ClusterExecutor: %s. Give the job an "
                "id of letters, digits, '_', '.' and '-' (add_job(..., id=...)); its run "
                "times are skipped on every process until then",
                job_id,
                problem,
            )
            return None
        if GENERATED_ID.fullmatch(str(job_id)):
            self._once(
                job_id,
                "generated",
                logging.WARNING,
                "APScheduler job %r looks like a generated id: each process generates its "
                "own, so each would run every run time; pass the same id= in every process",
                job_id,
            )
        return name

    def claimed_run_times(
        self, job: Job, run_times: Iterable[datetime]
    ) -> list[tuple[datetime, AppClaim]]:
        """Claim each run time of `job` that is still within its misfire grace; the won
        (run time, claim) pairs, oldest first. Without ZooKeeper: none, and one log line
        per outage."""
        name = self.claim_name(job.id)
        if name is None:
            return []
        if not self.cluster.connected:
            if not self._outage:
                self._outage = True
                log.warning(
                    "not connected to ZooKeeper: APScheduler runs are skipped on this process "
                    "until it is back (first skipped: %s at %s)",
                    job.id,
                    ", ".join(t.isoformat() for t in run_times),
                )
            return []
        if self._outage:
            self._outage = False
            log.info("connected to ZooKeeper again: APScheduler run times are claimed again")
        now = datetime.now(UTC)
        won: list[tuple[datetime, AppClaim]] = []
        seen: set[datetime] = set()
        for run_time in run_times:
            instant = claim_instant(run_time)
            if instant in seen:  # two sub-second run times name one claim
                continue
            seen.add(instant)
            if not within_grace(run_time, job.misfire_grace_time, now):
                log.debug("%s at %s is past its misfire grace: not claimed", job.id, instant)
                continue
            claim = self.cluster.claim(name, instant)
            if claim is None:
                log.debug("%s at %s: claimed elsewhere (or undecided): not run here", name, instant)
                continue
            if run_time.microsecond:
                self._once(
                    job.id,
                    "sub-second",
                    logging.WARNING,
                    "APScheduler job %r has sub-second run times (%s): claims are to the "
                    "second, and processes agree on run times only when their triggers do "
                    "(give an interval trigger a fixed start_date)",
                    job.id,
                    run_time.isoformat(),
                )
            won.append((run_time, claim))
        return won

    def submit_job(self, job: Job, run_times: list[datetime]) -> None:
        """Claim, then submit the won run times. MaxInstancesReachedError before any claim,
        so that a run time this process cannot start is left for another to claim."""
        assert self._lock is not None, "This executor has not been started yet"
        with self._lock:
            if self._instances[job.id] >= job.max_instances:
                raise MaxInstancesReachedError(job)
        # outside the lock: a claim is a ZooKeeper round trip, and run ends (which only
        # lower the count) take the lock; only this thread submits, so the check holds
        claims = self.claimed_run_times(job, run_times)
        if not claims:
            return
        with self._lock:
            try:
                self._submit(job, claims)
            except Exception as exc:  # the pool was shut down: the claims are lost here
                for _, claim in claims:
                    self._finish(claim, "error", f"not started: {exc}")
                raise
            self._instances[job.id] += 1

    def _do_submit_job(self, job: Job, run_times: list[datetime]) -> None:
        """Only `_submit` submits (with the claims); BaseExecutor.submit_job is not used."""
        raise NotImplementedError("ClusterExecutor submits through submit_job only")

    def _submit(self, job: Job, claims: list[tuple[datetime, AppClaim]]) -> None:
        # BasePoolExecutor._do_submit_job's work, with the claims bound to the future: the
        # run's end finishes exactly the claims of this submission
        future = self._pool.submit(self._run, job, claims)
        future.add_done_callback(partial(self._ended, job.id, [c for _, c in claims]))

    def _run(self, job: Job, claims: list[tuple[datetime, AppClaim]]) -> list[JobExecutionEvent]:
        """APScheduler's run_job, one run time at a time, so that `current_claim()` gives
        the job function the claim of the run time it runs for."""
        events: list[JobExecutionEvent] = []
        for run_time, claim in claims:
            _current.claim = claim
            try:
                events += run_job(job, job._jobstore_alias, [run_time], self._logger.name)
            finally:
                _current.claim = None
        return events

    def shutdown(self, wait: bool = True) -> None:
        """APScheduler's `scheduler.shutdown(wait)` calls this: no new runs; then, with
        `stop_cluster`, the Cluster stops once the runs under way have ended (at once with
        `wait`, else on a thread of its own), so that their results are recorded first."""
        super().shutdown(wait)
        if not self.stop_cluster:
            return
        if wait:
            self.cluster.stop()
        else:
            threading.Thread(target=self._stop_after_runs, name="zksched-aps-stop").start()

    def _stop_after_runs(self) -> None:
        self._pool.shutdown(wait=True)
        self.cluster.stop()

    # -- the run side (pool threads) ------------------------------------------------------

    def _ended(self, job_id: str, claims: list[AppClaim], future: Future[Any]) -> None:
        exc = future.exception()
        if exc is not None:
            for claim in claims:
                self._finish(claim, "error", f"run_job raised {type(exc).__name__}: {exc}")
            self._run_job_error(job_id, exc, exc.__traceback__)
            return
        events: list[JobExecutionEvent] = future.result()
        self.finish_runs(claims, events)
        self._run_job_success(job_id, events)

    def finish_runs(self, claims: list[AppClaim], events: list[JobExecutionEvent]) -> None:
        """Record each claim's end from the run event of its run time (matched to the
        second); a claim without an event ended in an unknown way: `error`."""
        by_instant = {claim.scheduled: claim for claim in claims}
        for event in events:
            claim = by_instant.pop(claim_instant(event.scheduled_run_time), None)
            if claim is not None:
                self._finish(claim, *run_result(event))
        for claim in by_instant.values():
            self._finish(claim, "error", "APScheduler reported no event for this run time")

    def _finish(self, claim: AppClaim, status: ClaimStatus, error: str | None) -> None:
        try:
            self.cluster.finish(claim, status, error)
        except Exception:  # never let bookkeeping break APScheduler's callback
            log.exception("could not record the end of %s", claim.key)

    def _once(self, job_id: str, what: str, level: int, message: str, *args: object) -> None:
        with self._said_lock:
            if (job_id, what) in self._said:
                return
            self._said.add((job_id, what))
        log.log(level, message, *args)
