"""An app's side of the job table: its function jobs go in at `Cluster.start()`.

The table wins (docs/library.md): a job there whose definition differs is a conflict, unless
the app was made with `replace=True`; the whole change is one compare-and-set of the table,
retried when another writer got there first, made on a short session of its own before the
member joins. With `auth`, nodes others may change are refused first, as `zksched run`
refuses them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from zksched.app.connecting import NotConnected, connect_once
from zksched.core.jobspec import JobSpec
from zksched.core.jobtable import plan_register
from zksched.zk.aclcheck import open_nodes, refusal
from zksched.zk.connection import ZkSettings, close_quietly
from zksched.zk.jobstore import (
    ConcurrentChange,
    CorruptTable,
    JobStore,
    UnreadableBuckets,
    now_utc,
)
from zksched.zk.paths import ClusterPaths

log = logging.getLogger("zksched.app")


class JobConflictError(RuntimeError):
    """A function job registered here differs from the job table's; nothing was changed."""

    def __init__(self, conflicts: Mapping[str, str]) -> None:
        self.conflicts = dict(conflicts)
        said = "; ".join(f"job {name!r}: {why}" for name, why in sorted(conflicts.items()))
        super().__init__(
            f"{said}. The job table's definition stands; start this process with "
            "Cluster(..., replace=True) to make its definition the table's (a deploy), or "
            "register the same options"
        )


class ClusterUnavailable(RuntimeError):
    """`Cluster.start()` could not reach ZooKeeper in time, or could not read or write the
    job table; this process has not joined."""


def register_function_jobs(
    settings: ZkSettings,
    client_id: str,
    specs: Mapping[str, JobSpec],
    replace: bool,
    timeout: float,
) -> None:
    """Put `specs` in cluster `client_id`'s job table (JobConflictError, PermissionError or
    ClusterUnavailable, and nothing changed, when they cannot go in)."""
    call_timeout = max(1.0, timeout / 3)
    try:
        client = connect_once(settings, timeout)
    except NotConnected as exc:
        jobs = f" and its {len(specs)} function job(s) are not registered" if specs else ""
        raise ClusterUnavailable(
            f"cannot reach ZooKeeper at {settings.hosts} within {timeout:g}s (last attempt: "
            f"{exc}): this process has not joined cluster {client_id}{jobs}; check the "
            "connect string and that ZooKeeper is up"
        ) from None
    try:
        paths = ClusterPaths(client_id)
        credential = settings.credential
        if credential is not None:  # nodes others may change: refused, as `zksched run` does
            problems = open_nodes(client, paths, credential, call_timeout)
            if problems:
                raise PermissionError(refusal(problems, credential[0]))
        store = JobStore(client, paths, call_timeout)
        for _attempt in range(10):
            try:
                unreadable: UnreadableBuckets | None = None
                try:
                    root, current = store.read_table(whole=True)
                except UnreadableBuckets as exc:  # harmless unless this start must write
                    root, current, unreadable = exc.root, exc.jobs, exc
                plan = plan_register(current, specs, replace, now_utc())
                if plan.conflicts:
                    raise JobConflictError(plan.conflicts)
                if not plan.created and not plan.replaced:
                    return
                if unreadable is not None:
                    raise unreadable
                store.commit(root, plan.table)
            except ConcurrentChange:
                continue
            except (CorruptTable, UnreadableBuckets) as exc:  # `jobs apply` repairs it
                raise ClusterUnavailable(
                    f"{exc}; nothing was registered: `zksched jobs apply FILE` with a file "
                    "that holds every job repairs the table"
                ) from None
            except (KazooException, KazooTimeoutError) as exc:
                # a commit whose reply was lost may have landed: starting again finds the
                # table equal (nothing to change) or commits then
                raise ClusterUnavailable(
                    f"the job table of {client_id} could not be read or written "
                    f"({type(exc).__name__}); this app's jobs may or may not be in it yet: "
                    "start again"
                ) from None
            for name in plan.created:
                log.info("registered function job %s", name, extra={"job": name})
            for name in plan.replaced:
                log.warning("replaced function job %s (replace=True)", name, extra={"job": name})
            return
        raise ClusterUnavailable("the job table kept changing; nothing was registered")
    finally:
        close_quietly(client)
