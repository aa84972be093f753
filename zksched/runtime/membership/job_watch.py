"""The daemon's copy of the job table, and pending manual triggers.

One watch on the table's root; on a change only the buckets whose id changed are read and
parsed (buckets are immutable, so parsed entries are cached by bucket id). A record that
does not parse disables only its job, loudly. Watches only wake this thread (never block
kazoo's threads); every call is bounded.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from zksched.core.jobspec.twins import SpecTwins
from zksched.core.jobtable import JobEntry, parse_stored_again
from zksched.zk.connection import wait
from zksched.zk.jobstore import ConcurrentChange, CorruptTable, JobStore, TableRoot
from zksched.zk.paths import ClusterPaths
from zksched.zk.triggers import Triggers

log = logging.getLogger(__name__)

RESYNC_INTERVAL = 60.0


@dataclass(frozen=True)
class JobsSnapshot:
    generation: int
    entries: dict[str, JobEntry] = field(default_factory=dict)

    @property
    def runnable(self) -> dict[str, JobEntry]:
        return {n: e for n, e in self.entries.items() if e.spec is not None}


@dataclass(frozen=True)
class Trigger:
    znode: str
    job: str


class JobTableWatcher:
    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        timeout: float,
        on_jobs: Callable[[JobsSnapshot], None],
        on_triggers: Callable[[list[Trigger]], None],
    ) -> None:
        self._client = client
        self._paths = paths
        self._timeout = timeout
        self._store = JobStore(client, paths, timeout)
        self._on_jobs = on_jobs
        self._on_triggers = on_triggers
        self._wakeup: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._parsed: dict[str, dict[str, JobEntry]] = {}  # bucket id -> its parsed jobs
        self._unreadable: set[str] = set()  # bucket ids that could not be read
        self._triggers = Triggers(client, paths, timeout)
        self._root: TableRoot | None = None
        self._jobs_dirty = True
        self._triggers_dirty = True
        self._last_sync = 0.0
        self._folders_ready = False
        self.snapshot = JobsSnapshot(-1)
        self.heartbeat = time.monotonic()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="zksched-jobs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.put("stop")
        self._client.remove_listener(self._on_state)
        if self._thread is not None:
            self._thread.join(timeout=self._timeout + 2)

    def poke(self) -> None:
        self._wakeup.put("poke")

    # kazoo callbacks: record and wake, nothing else
    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            self._wakeup.put("connected")

    def _on_root_changed(self, _event: Any) -> None:
        self._wakeup.put("jobs")

    def _on_triggers_changed(self, _event: Any) -> None:
        self._wakeup.put("triggers")

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.heartbeat = time.monotonic()
            try:
                reason = self._wakeup.get(timeout=1.0)
            except queue.Empty:
                reason = "tick"
            if self._stopping.is_set():
                return
            if reason in ("connected", "jobs", "poke"):
                self._jobs_dirty = True
            if reason in ("connected", "triggers", "poke"):
                self._triggers_dirty = True
            if reason == "connected":
                self._folders_ready = False
            if time.monotonic() - self._last_sync > RESYNC_INTERVAL:
                self._jobs_dirty = self._triggers_dirty = True
            if not self._client.connected:
                continue
            try:
                self._step()
            except (KazooException, KazooTimeoutError, ConcurrentChange) as exc:
                log.warning("could not read the job table (%s); retrying", type(exc).__name__)
                time.sleep(0.2)
                self._wakeup.put("poke")
            except Exception:
                log.exception("job table watcher step failed; retrying")
                time.sleep(0.5)
                self._wakeup.put("poke")

    def _step(self) -> None:
        if not self._folders_ready:
            wait(self._client.ensure_path_async(self._paths.triggers), self._timeout)
            self._folders_ready = True
        if self._jobs_dirty:
            self._jobs_dirty = False
            self._refresh_jobs()
        if self._triggers_dirty:
            self._triggers_dirty = False
            self._refresh_triggers()

    def _refresh_jobs(self) -> None:
        try:
            root = self._store.read_root(self._on_root_changed)
            self._last_sync = time.monotonic()
            if (
                self._root is not None
                and root.mzxid == self._root.mzxid
                and root.version == self._root.version
            ):
                return
            wanted = {b for b in root.buckets if b and b not in self._parsed}
            before = self.snapshot.entries
            twins = SpecTwins()
            # parsed as each comes: one bucket's decoded records in memory at a time (a
            # bucket parsed before a failure stays cached: blobs never change)
            for blob, (jobs, error) in self._store.read_blobs(root, wanted):
                parsed: dict[str, JobEntry] = {}
                for name, stored in jobs.items():
                    entry = parse_stored_again(stored, before.get(name), twins)
                    parsed[entry.name] = entry  # the entry's own name: one string a job
                self._parsed[blob] = parsed
                if error:  # logged as read
                    self._unreadable.add(blob)
                del jobs
        except CorruptTable as exc:
            log.error("%s; keeping the last good job table", exc)
            return
        entries: dict[str, JobEntry] = {}
        for blob in root.buckets:
            if blob:
                entries.update(self._parsed[blob])
        for stale in [b for b in self._parsed if b not in set(root.buckets)]:
            del self._parsed[stale]
            self._unreadable.discard(stale)
        previous = self.snapshot.entries
        for name, entry in entries.items():
            if entry.error and (name not in previous or previous[name].error != entry.error):
                log.error(
                    "job %s is disabled: %s",
                    name,
                    entry.error,
                    extra={"event": "job-invalid", "job": name, "error": entry.error},
                )
        self._root = root
        self.snapshot = JobsSnapshot(root.generation, entries)
        self._triggers_dirty = True  # triggers of jobs gone with this change are swept
        log.info(
            "job table generation %d: %d jobs (%d disabled)",
            root.generation,
            len(entries),
            sum(1 for e in entries.values() if e.error),
            extra={"event": "jobs", "generation": root.generation, "jobs": len(entries)},
        )
        self._on_jobs(self.snapshot)

    def _refresh_triggers(self) -> None:
        try:
            children = wait(
                self._client.get_children_async(self._paths.triggers, self._on_triggers_changed),
                self._timeout,
            )
        except NoNodeError:
            self._folders_ready = False
            self._wakeup.put("poke")
            return
        if children:
            self._on_triggers(
                [Trigger(c, ClusterPaths.job_of_trigger(c)) for c in sorted(children)]
            )
            self._sweep(children)

    def _sweep(self, children: list[str]) -> None:
        root = self._root
        if root is None or any(b in self._unreadable for b in root.buckets):
            return  # a job of a bucket not read is not known to be gone
        gone = self._triggers.sweep(children, self.snapshot.entries.keys(), root.mzxid)
        if gone:
            log.warning(
                "deleted %d trigger node(s) of jobs not in the job table (e.g. %s)",
                len(gone),
                gone[0][:80],  # the log's formatters escape what it quotes
                extra={"event": "trigger-stray", "count": len(gone)},
            )
