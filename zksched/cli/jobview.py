"""What the jobs commands read of a cluster, once: the job table parsed, the members and
their owner table, each job's row (owner, next fire, last result); and the one way their
ZooKeeper errors are told."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from zksched.cli.context import CliContext
from zksched.cli.errors import EXIT_INVALID, CliFailure, invalid
from zksched.core.firekey import format_utc
from zksched.core.firerecord import FireRecord
from zksched.core.jobtable import JobEntry, parse_stored
from zksched.core.names import name_problem
from zksched.core.owners import OwnerTable
from zksched.core.schedule import OneOffSchedule
from zksched.zk.claims import FireClaims
from zksched.zk.jobstore import (
    ConcurrentChange,
    CorruptTable,
    JobStore,
    UnreadableBuckets,
)
from zksched.zk.membership import MemberReader, MemberSnapshot
from zksched.zk.paths import ClusterPaths


@dataclass
class ClusterReader:
    """What the reading commands need, read once."""

    client: KazooClient
    store: JobStore
    claims: FireClaims
    entries: dict[str, JobEntry]
    members: MemberSnapshot
    paths: ClusterPaths
    timeout: float

    @cached_property
    def table(self) -> OwnerTable:
        return OwnerTable(self.members.members)

    @property
    def live_sessions(self) -> set[int]:
        return set(self.members.owners.values())

    def owner(self, entry: JobEntry) -> str | None:
        if entry.spec is None:
            return None
        return self.table.job_owner(entry.name, entry.spec)

    def owner_note(self, entry: JobEntry) -> str | None:
        """Why no live member may run the job, when none may."""
        if entry.spec is None or self.owner(entry) is not None:
            return None
        if entry.spec.kind == "function":
            return "no live app registered this function with this definition"
        daemons = [m for m in self.table.members if m.functions is None]
        if any(m.eligible_for(entry.spec.labels) for m in daemons):
            return "no member allows this command"
        if daemons:
            return "no live member has its labels"
        if self.table.members:
            return "no live daemon: app members (zksched.Cluster) run function jobs only"
        return "no live member"


@contextmanager
def zk_errors() -> Iterator[None]:
    try:
        yield
    except CorruptTable as exc:
        raise CliFailure(str(exc)) from None
    except UnreadableBuckets as exc:
        raise CliFailure(
            f"{exc}; nothing was changed: `zksched jobs apply FILE` with a file that holds "
            "every job replaces it"
        ) from None
    except ConcurrentChange as exc:
        raise CliFailure(f"{exc}; try again") from None
    except (KazooException, KazooTimeoutError) as exc:
        raise CliFailure(f"ZooKeeper request failed: {type(exc).__name__}") from None


@contextmanager
def cluster(ctx: CliContext, only: str | None = None) -> Iterator[ClusterReader]:
    """`only`: the command is about that job alone; `entries` holds it alone (if it is a job)."""
    with ctx.client() as client, zk_errors():
        store = JobStore(client, ctx.paths, ctx.connect_timeout)
        if only is None:
            _, stored = store.read_table()
        else:
            job = store.read_job(only)
            stored = {} if job is None else {only: job}
        try:
            members = MemberReader(client, ctx.paths, ctx.connect_timeout).read()
        except NoNodeError:
            members = MemberSnapshot(())
        entries = {name: parse_stored(job) for name, job in sorted(stored.items())}
        yield ClusterReader(
            client,
            store,
            FireClaims(client, ctx.paths, ctx.connect_timeout),
            entries,
            members,
            ctx.paths,
            ctx.connect_timeout,
        )


def check_job_name(name: str) -> None:
    problem = name_problem(name, "job name")
    if problem:
        raise invalid(problem)


def entry_of(c: ClusterReader, name: str) -> JobEntry:
    check_job_name(name)
    entry = c.entries.get(name)
    if entry is None:
        raise CliFailure(f"no job named {name!r} in cluster {c.paths.client_id}", EXIT_INVALID)
    return entry


# -- apply ---------------------------------------------------------------------------------


def _next_fire(entry: JobEntry) -> str | None:
    if entry.spec is None or entry.spec.paused:
        return None
    try:
        instant = entry.spec.schedule_obj.next_fire(datetime.now(UTC))
    except Exception:
        return None
    return instant.isoformat()


def _one_off_done(entry: JobEntry, last: FireRecord | None) -> bool:
    """A one-off job whose instant has its final record (it ran, or was skipped)."""
    schedule = entry.spec.schedule_obj if entry.spec is not None else None
    if not isinstance(schedule, OneOffSchedule) or last is None:
        return False
    return last.scheduled == format_utc(schedule.at) and last.state != "running"


def job_row(c: ClusterReader, entry: JobEntry, last: FireRecord | None) -> dict[str, Any]:
    spec = entry.spec
    row: dict[str, Any] = {
        "name": entry.name,
        "kind": spec.kind if spec else None,
        "schedule": spec.schedule if spec else None,
        "timezone": spec.timezone if spec else None,
        "paused": spec.paused if spec else None,
        "owner": c.owner(entry),
        "owner_note": c.owner_note(entry),
        "next_fire": _next_fire(entry),
        "last_result": last.shown_state(c.live_sessions) if last else None,
        "last_scheduled": last.scheduled if last else None,
        "updated_at": entry.updated_at,
        "error": entry.error,
        "done": _one_off_done(entry, last),
    }
    return row
