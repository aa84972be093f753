"""`Cluster`: zksched inside a Python app. Functions registered with `@cluster.cron(...)`
run once per instant across every process that registers them.

Each process is a member of the cluster like a `zksched run` daemon (the same membership,
owner table, fire core, claims and locks), except that it runs only the function jobs it
registered and no command; daemons run no function job. So a cluster id may hold daemons
and apps side by side, and `zksched jobs list`, `status`, `history`, `audit` and metrics show
function jobs like any other.

Who wins when two processes register one name with different options: **the job table**.
The first process to start puts its definition in; a process whose definition differs
raises `JobConflictError` at `start()` (nothing changed), unless it was made with
`replace=True` (a deploy that changes the job on purpose): then its definition replaces
the table's, and members still running the old definition are no longer given the job.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, Unpack

from kazoo.protocol.states import KazooState

from zksched.app import arguments
from zksched.app.coordination import AppClaim, ClaimStatus, Coordinator
from zksched.app.definitions import JobDefinitionError, JobOptions, function_job_spec
from zksched.app.leadership import LeaderTerm, lead, tell_changes
from zksched.app.registration import (
    register_function_jobs,
)
from zksched.app.signals import stop_on_signals
from zksched.core.jobspec import JobSpec
from zksched.core.jobspec.passed import passed_note
from zksched.core.members import MAX_FUNCTIONS
from zksched.runtime.daemon import Daemon, DaemonConfig
from zksched.runtime.run import JobFunction
from zksched.zk.applocks import AppLock
from zksched.zk.connection import ZkSettings
from zksched.zk.election import LeaderElection

log = logging.getLogger("zksched.app")

F = TypeVar("F", bound=Callable[..., Any])


_started_here = itertools.count(1)  # Clusters started in this process


def _process_member_id() -> str:
    """`<host>-<pid>` like a daemon's, with `-<n>` for a second Cluster in one process."""
    n = next(_started_here)
    return f"{socket.gethostname()}-{os.getpid()}" + ("" if n == 1 else f"-{n}")


class Cluster:
    """This process as a member of cluster `client_id` on the ZooKeeper ensemble `zk`."""

    def __init__(
        self,
        zk: str,
        client_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        member_id: str | None = None,
        concurrency: int = 8,
        session_timeout: float = 10.0,
        auth: str | None = None,
        replace: bool = False,
        stop_grace: float = 30.0,
        on_session_loss: Literal["terminate", "continue"] = "terminate",
        http: str | None = None,
    ) -> None:
        """`http`: HOST:PORT to serve /metrics, /healthz, /readyz and the status page on
        (a small child process, as `zksched run --http` does); None: no port. A bad
        argument raises ValueError naming it, the value given and what is accepted
        (zksched/app/arguments.py); nothing is connected before start()."""
        zk = arguments.check_zk(zk)
        client_id = arguments.check_name("client_id", client_id, "client id")
        labels = arguments.check_labels(labels)
        if member_id is not None:
            member_id = arguments.check_name("member_id", member_id, "member id")
        concurrency = arguments.check_concurrency(concurrency)
        session_timeout = arguments.check_number(
            "session_timeout",
            session_timeout,
            arguments.SESSION_TIMEOUT_RANGE,
            "the session timeout",
            "10",
        )
        auth = arguments.check_auth(auth)
        replace = arguments.check_bool("replace", replace)
        stop_grace = arguments.check_number(
            "stop_grace", stop_grace, arguments.STOP_GRACE_RANGE, "stop_grace", "30"
        )
        on_session_loss = arguments.check_session_loss(on_session_loss)
        http = arguments.check_http(http)
        self._settings = ZkSettings(hosts=zk, session_timeout=session_timeout, auth=auth)
        self._settings.validate()
        self.client_id = client_id
        self._given_member_id = member_id
        self.member_id = member_id or ""  # set by start(): in the process that runs it
        self._config = DaemonConfig(
            zk=self._settings,
            client_id=client_id,
            labels=labels,
            concurrency=concurrency,
            on_session_loss=on_session_loss,
            stop_grace=stop_grace,
            http=http,
        )
        self._replace = replace
        self._jobs: dict[str, tuple[JobSpec, JobFunction]] = {}
        self._lock = threading.Lock()
        self._daemon: Daemon | None = None
        self._coordinator: Coordinator | None = None
        self._election: LeaderElection | None = None
        self._leader_listeners: list[Callable[[bool, int | None], None]] = []
        self._stopped = False
        self._started_pid: int | None = None  # the process start() ran in (fork check)

    # -- registering ----------------------------------------------------------------------

    def cron(
        self,
        schedule: str | None = None,
        *,
        at: str | datetime | None = None,
        name: str | None = None,
        **options: Unpack[JobOptions],
    ) -> Callable[[F], F]:
        """Decorate a function to run on `schedule` (cron text: 5 or 6 fields, or a macro
        such as "@daily") once per instant across the cluster, or once, `at` a time (ISO
        8601 text with an offset, or an aware datetime), exactly as a job file's `schedule`
        and `at`. Options as in job files: tz, timeout, jitter, overlap, catchup,
        catchup_window, retries, retry_backoff, delivery, labels, history, paused
        (durations as "90s" text, seconds, or timedeltas). The job is named after the
        function unless `name` is given. Raises JobDefinitionError at once when anything is
        wrong, naming the function, the job and each option with what it accepts; nothing
        is registered then. A one-off time that has passed is accepted, as in a job file,
        and a warning says what becomes of it."""

        def register(function: F) -> F:
            self.add_job(function, schedule, at=at, name=name, **options)
            return function

        return register

    def add_job(
        self,
        function: JobFunction,
        schedule: str | None = None,
        *,
        at: str | datetime | None = None,
        name: str | None = None,
        **options: Unpack[JobOptions],
    ) -> JobSpec:
        """`cron` without the decorator; returns the job's spec."""
        if not callable(function):
            raise JobDefinitionError(f"{function!r} is not callable; nothing was registered")
        spec = function_job_spec(function, name, schedule, options, at=at)
        with self._lock:
            if len(self._jobs) >= MAX_FUNCTIONS:
                raise JobDefinitionError(
                    f"job {spec.name!r}: an app registers at most {MAX_FUNCTIONS:,} function "
                    "jobs (its member record lists them all); nothing was registered"
                )
            if self._daemon is not None:
                raise JobDefinitionError(
                    f"job {spec.name!r}: register function jobs before start(); "
                    "nothing was registered"
                )
            if spec.name in self._jobs:
                raise JobDefinitionError(
                    f"job {spec.name!r} is registered twice in this process (the second by "
                    f"{getattr(function, '__qualname__', function)!r}); nothing was registered"
                )
            self._jobs[spec.name] = (spec, function)
        note = passed_note(spec, datetime.now(UTC))
        if note is not None:
            log.warning("function job %s: at %s", spec.name, note, extra={"job": spec.name})
        return spec

    @property
    def jobs(self) -> Mapping[str, JobSpec]:
        """The function jobs registered here."""
        return {name: spec for name, (spec, _) in self._jobs.items()}

    # -- running --------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Put this app's function jobs in the job table (JobConflictError if the table has
        another definition of one), then join the cluster. Returns once this member is in
        the member table (or after `timeout`: it goes on joining in the background)."""
        with self._lock:
            if self._daemon is not None:
                self._refuse_if_forked()
                return
            if self._stopped:
                raise RuntimeError("a stopped Cluster cannot start again; make a new one")
            specs = {name: spec for name, (spec, _) in self._jobs.items()}
            register_function_jobs(self._settings, self.client_id, specs, self._replace, timeout)
            # the pid of the process that starts it: workers forked from one master (gunicorn
            # --preload) must never share a member id (they would count as one member)
            self.member_id = self._given_member_id or _process_member_id()
            functions = {n: (spec.definition_hash, fn) for n, (spec, fn) in self._jobs.items()}
            config = dataclasses.replace(self._config, member_id=self.member_id)
            self._daemon = daemon = Daemon(config, functions=functions)
            self._started_pid = os.getpid()
            call_timeout = max(1.0, self._settings.session_timeout / 3)
            self._coordinator = Coordinator(
                self._daemon.client,
                self._daemon.paths,
                self.member_id,
                call_timeout,
                history_of=self._table_history,
            )
            self._election = election = self._coordinator.leader_election()
            for listener in self._leader_listeners:
                election.add_listener(listener)
            # leadership ends when the member's contact watchdog says contact is lost
            daemon.cluster.add_view_listener(lambda view: election.contact(view.connected))
            daemon.start()
            election.start()  # a candidate from the start: one ephemeral node
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not daemon.status.readiness().ok:
            time.sleep(0.05)

    def stop(self) -> None:
        """Leave the cluster: the others take this member's jobs at once; runs under way
        are told to stop if they outlast `stop_grace`. The jobs stay in the table (other
        replicas run them); `zksched jobs delete NAME` removes one."""
        with self._lock:
            daemon, self._daemon = self._daemon, None
            election, self._election = self._election, None
            coordinator, self._coordinator = self._coordinator, None
            self._stopped = True
            if self._forked():
                return  # the member is the parent's: a child's copy only lets go of it
        if coordinator is not None:
            coordinator.close()
        if election is not None:
            election.stop()  # the next candidate leads at once
        if daemon is not None:
            daemon.stop()

    def stop_on_signals(self, *signals: int) -> None:
        """Stop this Cluster when the process gets one of `signals` (default SIGTERM and
        SIGINT), then let the signal do what it did before: the handler that was there
        runs once the stop is done (Python's defaults: SIGTERM ends the process, SIGINT
        raises KeyboardInterrupt in the main thread). So a deploy's SIGTERM hands this
        member's jobs and leadership over at once instead of after a session timeout. A
        second signal during the stop does at once what it did before. The stop runs on a
        thread of its own (never inside the handler, which may have interrupted the main
        thread anywhere). Call it from the main thread, where Python runs signal handlers;
        gunicorn workers install their own handlers after `post_fork`: stop the Cluster in
        `worker_exit` there."""
        stop_on_signals(self.stop, signals or (signal.SIGTERM, signal.SIGINT))

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- what this member sees ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Started and not stopped, in this process (False in a child forked after start)."""
        return self._daemon is not None and not self._forked()

    def _forked(self) -> bool:
        """Whether this is a child forked after start(): the session, its threads and the
        leadership belong to the parent, so this copy must not act on them."""
        return self._started_pid is not None and self._started_pid != os.getpid()

    def _refuse_if_forked(self) -> None:
        if self._forked():
            raise RuntimeError(
                f"this Cluster was started in process {self._started_pid}, and this process "
                f"({os.getpid()}) is a fork of it: a ZooKeeper session and its threads do not "
                "survive a fork. Make and start a Cluster in each worker after the fork "
                "(gunicorn: in post_fork), never in the master"
            )

    @property
    def connected(self) -> bool:
        """Whether this member has a ZooKeeper session now (claims are refused without one:
        schedulers built on `claim` use this to say why a run was skipped)."""
        daemon = self._daemon
        return (
            daemon is not None
            and not self._forked()
            and daemon.client.state == KazooState.CONNECTED
            and bool(daemon.client.client_id)
        )

    def is_owner(self, name: str) -> bool:
        """Whether this member owns `name` now: a job in the table as the owner table gives
        it; any other name by rendezvous over the live app members (labels left out; daemons
        sharing the cluster id never act on such a name). False while not connected or not
        started: a question, unlike the actions claim(), lock() and leader(), which raise
        RuntimeError before start()."""
        daemon = self._daemon
        if daemon is None or self._forked():
            return False
        view = daemon.view
        entry = daemon.jobs.snapshot.entries.get(name)
        spec = None if entry is None else entry.spec
        if spec is not None:
            return view.owns_job(name, spec)
        return view.active and view.table.owner(name, apps_only=True) == self.member_id

    # -- coordination, for schedulers that keep their own timer ----------------------------

    def claim(self, name: str, instant: datetime) -> AppClaim | None:
        """The per-fire record of (`name`, `instant`): exactly one caller across the cluster
        gets it (an AppClaim with the fire key and fencing token), every other gets None (as
        does a caller that cannot reach ZooKeeper: no instant is ever claimed twice, and one
        behind the name's pruning horizon, docs/library.md). The
        instant must be timezone-aware; it is taken to the second in UTC. `finish()` records
        how the run ended; `zksched jobs history NAME` shows both when NAME is a job."""
        return self._require_coordinator().claim(name, instant)

    def finish(self, claim: AppClaim, status: ClaimStatus = "ok", error: str | None = None) -> bool:
        """Record the claimed run's end ("ok", "failed" or "error"); False: not written yet
        (ZooKeeper did not answer), it is retried in the background."""
        return self._require_coordinator().finish(claim, status, error)

    def lock(
        self, name: str, blocking: bool = False, timeout: float | None = None
    ) -> AbstractContextManager[AppLock]:
        """`with cluster.lock(name):` holds the cluster-wide lock `name` (never a job's lease);
        LockNotAcquired when another member holds it (blocking=False) or `timeout` passed.
        Check `lock.lost` in long work: a lost session releases it."""
        return self._require_coordinator().lock(name).hold(blocking, timeout)

    def is_leader(self) -> bool:
        """Whether this member leads the cluster now (one leader per cluster id; False while
        the connection is suspended: the session may be gone)."""
        election = self._election
        return election is not None and not self._forked() and election.is_leader

    def leader_term(self) -> int | None:
        """This member's term's fencing token while it leads (it grows with every term across
        the cluster: pass it along with writes so that a deposed leader's are refused)."""
        election = self._election
        return None if election is None or self._forked() else election.term

    def on_leader_change(self, callback: Callable[[bool, int | None], None]) -> None:
        """Call `callback(leading, token)` whenever this member starts or stops leading
        (from the election's thread: keep it short). Registered before start(), it hears
        every change; after, it is first told at once if this member leads already."""
        with self._lock:
            election = self._election
            if election is None:
                self._leader_listeners.append(callback)
                return
        tell_changes(election, callback)

    @contextmanager
    def leader(self, timeout: float | None = None) -> Iterator[LeaderTerm]:
        """Wait until this member leads (TimeoutError after `timeout`), then run the block
        as the leader: the LeaderTerm's `token` is the term's fencing token, and its `lost`
        event is set the moment leadership is lost (check it in the block)."""
        election = self._require_election()
        with lead(election, timeout, self.client_id, lambda: self._election) as term:
            yield term

    def _table_history(self, name: str) -> int | None:
        """The job table's `history` of `name`, when it is a job there."""
        daemon = self._daemon
        entry = None if daemon is None else daemon.jobs.snapshot.entries.get(name)
        return None if entry is None or entry.spec is None else entry.spec.history

    def _require_coordinator(self) -> Coordinator:
        coordinator = self._coordinator
        if coordinator is None or self._daemon is None:
            raise RuntimeError(self._not_running())
        self._refuse_if_forked()
        return coordinator

    def _require_election(self) -> LeaderElection:
        election = self._election
        if election is None:
            raise RuntimeError(self._not_running())
        self._refuse_if_forked()
        return election

    def _require_daemon(self) -> Daemon:
        daemon = self._daemon
        if daemon is None:
            raise RuntimeError(self._not_running())
        self._refuse_if_forked()
        return daemon

    def _not_running(self) -> str:
        if self._stopped:
            return (
                "the Cluster is stopped: claim(), finish(), lock() and leader() need a "
                "running one (a stopped Cluster cannot start again: make a new one); the "
                "questions is_owner(), is_leader() and connected answer False"
            )
        return _NOT_STARTED


_NOT_STARTED = (
    "the Cluster is not started: call start() (or use `with`) before claim(), finish(), "
    "lock() and leader(); until then the questions is_owner(), is_leader() and connected "
    "answer False, and leader_term() None"
)
