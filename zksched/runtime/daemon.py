"""The `zksched run` daemon: wires the ZooKeeper client, membership, the job table and the
fire path together, and stops in the order that hands jobs over at once."""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from zksched._version import __version__
from zksched.core.members import Member
from zksched.runtime.clock import Clock
from zksched.runtime.fire import FireEngine, FireSettings
from zksched.runtime.gcsteward import GcSteward
from zksched.runtime.host import ThreadHost
from zksched.runtime.membership import (
    ClockProbe,
    ClusterMembership,
    ClusterView,
    JobsSnapshot,
    JobTableWatcher,
)
from zksched.runtime.run import CommandRunner, FunctionRunner, JobFunction, Reaper
from zksched.runtime.skips import SkipLog
from zksched.runtime.status import (
    CatchupObserver,
    DaemonStatus,
    FireObserver,
    HttpEndpoint,
    SkipObserver,
)
from zksched.zk.connection import ZkSettings, close_quietly, make_client
from zksched.zk.fire_stores import ZkFireStores
from zksched.zk.handler import session_timeout_of
from zksched.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

# A starting member joins the cluster (creates its node) only once it has read the job
# table and weighed every job's owner, or this many seconds after it first read the members:
# joined before, its share would be handed to it while it could not run it yet.
JOIN_HOLD_LIMIT = 60.0


def default_member_id() -> str:
    return member_id_of(os.getpid())


def member_id_of(pid: int) -> str:
    """The member id a daemon with this pid on this host registers with by default."""
    return f"{socket.gethostname()}-{pid}"


@dataclass(frozen=True)
class DaemonConfig:
    zk: ZkSettings
    client_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    member_id: str = field(default_factory=default_member_id)
    concurrency: int = 32
    on_session_loss: Literal["terminate", "continue"] = "terminate"
    stop_grace: float = 30.0  # how long a graceful stop lets running commands finish
    clock_offset: float = 0.0  # tests only: skew this member's clock
    http: str | None = None  # HOST:PORT of /metrics, /healthz, /readyz and /; None: off
    # fnmatch patterns on a job's argv[0]; None: every command may run on this member.
    allowed_commands: tuple[str, ...] | None = None
    # full garbage collections at quiet moments only (gcsteward.py); it sets the process's
    # gc thresholds, so only for a process that runs one daemon (`zksched run`)
    steward_gc: bool = False


class Daemon:
    """One cluster member. `start()` returns at once; it joins whenever ZooKeeper answers.

    With `functions` (job name -> (spec hash, function)) it is an app's member
    (`zksched.Cluster`): it runs those function jobs, registered with those very specs, and
    no command; without, a `zksched run` daemon."""

    def __init__(
        self,
        config: DaemonConfig,
        functions: Mapping[str, tuple[str, JobFunction]] | None = None,
    ) -> None:
        self.config = config
        self.paths = ClusterPaths(config.client_id)
        self.client = make_client(config.zk)
        self.clock = Clock(config.clock_offset)
        self.member = Member(
            member_id=config.member_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            labels=dict(config.labels),
            started_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            version=__version__,
            allowed_commands=config.allowed_commands,
            functions=(None if functions is None else {n: h for n, (h, _) in functions.items()}),
        )
        self._foreign: dict[str, str] = {}  # function jobs not ours in the table: why
        self.cluster = ClusterMembership(
            self.client,
            self.paths,
            self.member,
            session_timeout=config.zk.session_timeout,
            hosts_label=config.zk.hosts,
            hold_join=JOIN_HOLD_LIMIT,
        )
        call_timeout = max(1.0, config.zk.session_timeout / 3)
        self.skips = SkipLog()
        runner = CommandRunner()
        # a dead daemon's commands stop well before its session can expire (reaper.py); an
        # app's functions die with its process
        self.reaper = (
            Reaper(grace=max(0.2, config.zk.session_timeout / 4)) if functions is None else None
        )
        runner.reaper = self.reaper
        self.functions = (
            None
            if functions is None
            else FunctionRunner({n: f for n, (_, f) in functions.items()}, config.concurrency)
        )
        self.engine = FireEngine(
            ZkFireStores(self.client, self.paths, config.member_id, call_timeout),
            runner,
            self.skips,
            FireSettings(
                client_id=config.client_id,
                member_id=config.member_id,
                on_session_loss=config.on_session_loss,
                call_timeout=call_timeout,
                allowed_commands=config.allowed_commands,
                concurrency=config.concurrency,
            ),
            ThreadHost(self.clock),
            functions=self.functions,
        )
        # the member's node appears once the engine has weighed every job's owner
        self.engine.on_ready_to_join = self.cluster.join
        self.cluster.add_session_loss_listener(self.engine.session_lost)
        self.jobs = JobTableWatcher(
            self.client,
            self.paths,
            call_timeout,
            on_jobs=self._on_jobs,
            on_triggers=self.engine.triggers,
        )
        if self.reaper is not None:  # first: the grace fits before any fire of the view
            self.cluster.add_view_listener(self._fit_reaper_grace)
        self.cluster.add_view_listener(self.engine.update_view)
        self.clock_probe = ClockProbe(
            self.client, self.paths, config.member_id, self.clock, call_timeout
        )
        self._stop_requested = threading.Event()
        self._started = False
        self._stopped = False
        self.gc_steward = GcSteward(self._quiet) if config.steward_gc else None
        self.status = DaemonStatus(self)
        self.http = HttpEndpoint(self.status, config.http) if config.http else None

    def _quiet(self, ahead: float) -> bool:
        """Nothing running or being recorded, no change being derived or aligned (a full pass at a
        million jobs would hold a takeover for seconds), and nothing due within `ahead`
        seconds."""
        if self.engine.busy() or self.engine.core.aligning or self.engine.owners.deriving:
            return False
        due = self.engine.next_due()
        return due is None or due - self.clock.now() > ahead

    def _fit_reaper_grace(self, view: ClusterView) -> None:
        """A quarter of the session timeout the server granted, once connected (it may be
        shorter than the one asked for)."""
        if view.connected and self.reaper is not None:
            granted = session_timeout_of(self.client, self.config.zk.session_timeout)
            self.reaper.set_grace(max(0.2, granted / 4))

    def _on_jobs(self, snapshot: JobsSnapshot) -> None:
        self.cluster.job_table_read()
        self.engine.update_jobs(snapshot)
        if self.member.functions is not None:
            self._note_foreign_definitions(snapshot)
        if not self.config.steward_gc:
            return  # an app's heap is the app's: no freezing it
        # The job table and everything built at start live long: take them out of the
        # cyclic garbage collector's full passes, which otherwise walk all of them and held
        # every thread (probes too) for 30-110 ms during a burst of fires (docs/benchmarks.md,
        # http). Records are freed by reference counting all the same when a reload drops
        # them; only garbage cycles alive at this moment would stay (there are next to none).
        gc.freeze()

    def _note_foreign_definitions(self, snapshot: JobsSnapshot) -> None:
        """Say once (per change) when a function job this app registered is not its own in
        the table any more: it then runs nowhere, and nothing else would say why."""
        assert self.member.functions is not None
        for name, ours in self.member.functions.items():
            entry = snapshot.entries.get(name)
            spec = None if entry is None else entry.spec
            if entry is None:
                why = "is not in the job table (deleted?)"
            elif spec is None:
                why = ""  # an invalid record: the job table watcher says why
            elif spec.kind != "function" or spec.definition_hash != ours:
                why = "in the job table is another definition than this app's (changed since)"
            else:
                why = ""
            if why and self._foreign.get(name) != why:
                log.warning(
                    "function job %s %s: this app does not run it; start the app with "
                    "replace=True to put its own back",
                    name,
                    why,
                    extra={"event": "function-job-foreign", "job": name},
                )
            self._foreign[name] = why

    @property
    def stopping(self) -> bool:
        return self._stop_requested.is_set()

    @property
    def view(self) -> ClusterView:
        return self.cluster.view

    # -- what the status side reads (`StatusSource`) ------------------------------------------

    @property
    def client_id(self) -> str:
        return self.config.client_id

    @property
    def member_id(self) -> str:
        return self.member.member_id

    @property
    def session_timeout(self) -> float:
        return self.config.zk.session_timeout

    def now(self) -> float:
        return self.clock.now()

    def now_dt(self) -> datetime:
        return self.clock.now_dt()

    def job_table(self) -> JobsSnapshot:
        return self.jobs.snapshot

    def heartbeats(self) -> dict[str, float]:
        now_mono = time.monotonic()
        return {
            "cluster coordinator": now_mono - self.cluster.heartbeat,
            "job table watcher": now_mono - self.jobs.heartbeat,
            "fire timer": self.clock.now() - self.engine.heartbeat,  # it beats on self.clock
        }

    def owned_count(self) -> int:
        return len(self.engine.owned_jobs())

    def clock_offset(self) -> float | None:
        reading = self.clock_probe.last
        return None if reading is None else reading.offset_ms / 1000

    def observe(
        self, on_fire: FireObserver, on_skip: SkipObserver, on_catchup: CatchupObserver
    ) -> None:
        self.engine.observers.append(on_fire)
        self.skips.listeners.append(on_skip)
        self.engine.catchup_observers.append(on_catchup)

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.http is not None:
            self.http.start()  # first: a port in use fails before joining the cluster
        log.info(
            "starting member %s of cluster %s (ZooKeeper %s, session timeout %gs)",
            self.member.member_id,
            self.config.client_id,
            self.config.zk.hosts,
            self.config.zk.session_timeout,
            extra={"event": "start", "member_id": self.member.member_id},
        )
        if self.gc_steward is not None:
            self.gc_steward.start()
        if self.reaper is not None:
            self.reaper.start()
        self.engine.start()
        self.cluster.start()
        self.jobs.start()
        self.clock_probe.start()
        self.client.start_async()  # retries forever; the coordinator joins once connected

    def request_stop(self) -> None:
        """Signal-safe: ask the run loop to stop."""
        self._stop_requested.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._stop_requested.wait(timeout)

    def stop(self) -> None:
        """Graceful stop. Order matters: no new fires; leave (the others take over at once);
        let running commands finish (up to stop_grace) holding their locks; close the session."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_requested.set()
        started = time.monotonic()
        self.engine.stop_dispatching()  # idle job locks go back before we leave
        self.jobs.stop()
        self.clock_probe.stop()
        self.cluster.stop()
        self.engine.stop(wait_for_running=self.config.stop_grace)
        if self.reaper is not None:
            self.reaper.close()
        if self.functions is not None:
            self.functions.close()
        close_quietly(self.client)
        if self.http is not None:
            self.http.stop()
        if self.gc_steward is not None:
            self.gc_steward.stop()
        log.info("stopped after %.1fs", time.monotonic() - started, extra={"event": "stopped"})

    def run(self) -> None:
        """Start, block until request_stop(), stop."""
        self.start()
        try:
            while not self._stop_requested.wait(1.0):  # wakes often enough for signal handlers
                pass
        finally:
            self.stop()
