"""The cluster's job table as data: stored entries, parsing them, and planning an apply.

Pure: no ZooKeeper. The ZooKeeper layer stores a table as buckets of these entries
(see zksched/zk/jobstore.py).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from zksched.core.firekey import parse_utc
from zksched.core.jobspec import JobSpec, JobSpecError
from zksched.core.jobspec.twins import SpecTwins
from zksched.core.names import name_problem


@dataclass(frozen=True)
class StoredJob:
    """One job as stored: its record (raw, possibly malformed) and when it last changed."""

    name: str
    record: Any
    updated_at: str  # UTC "…Z": the catch-up of a changed or resumed job starts here

    def to_data(self) -> dict[str, Any]:
        return {"spec": self.record, "updated_at": self.updated_at}


@dataclass(frozen=True, slots=True)
class JobEntry:
    """A stored job, parsed: exactly one of `spec` and `error` is set."""

    name: str
    spec: JobSpec | None
    error: str | None
    updated_at: str

    @property
    def runnable(self) -> bool:
        return self.spec is not None


class RunnableSpecs(Mapping[str, JobSpec]):
    """name -> spec of the runnable jobs among parsed `entries`: a view, not a table of its
    own (a daemon holds a million jobs; each table of them costs ~50 bytes a job). The
    entries must not change while it is in use (a job table snapshot's never do)."""

    __slots__ = ("_entries", "_len")

    def __init__(self, entries: Mapping[str, JobEntry]) -> None:
        self._entries = entries
        self._len = sum(1 for e in entries.values() if e.spec is not None)

    def __getitem__(self, name: str) -> JobSpec:
        spec = self._entries[name].spec
        if spec is None:
            raise KeyError(name)
        return spec

    def __contains__(self, name: object) -> bool:
        # not Mapping's (a KeyError raised for each name not runnable): asked a job at a time
        entry = self._entries.get(name)  # type: ignore[call-overload]
        return entry is not None and entry.spec is not None

    def __iter__(self) -> Iterator[str]:
        return (name for name, e in self._entries.items() if e.spec is not None)

    def __len__(self) -> int:
        return self._len

    def items(self) -> ItemsView[str, JobSpec]:
        return _SpecItems(self)


class FireTable(Mapping[str, tuple[JobSpec, float]]):
    """name -> (spec, when it last changed, epoch seconds) of the runnable jobs among
    `entries`, as the fire core reads the table: a view, whose pairs are made when asked
    for; one float per distinct `updated_at` (an apply stamps its jobs alike)."""

    __slots__ = ("_changed", "specs")

    def __init__(self, entries: Mapping[str, JobEntry]) -> None:
        self.specs = RunnableSpecs(entries)
        self._changed: dict[str, float] = {}

    def changed(self, updated_at: str) -> float:
        """`updated_at` as epoch seconds (0: unreadable, i.e. long ago)."""
        found = self._changed.get(updated_at)
        if found is None:
            try:
                found = parse_utc(updated_at).timestamp()
            except ValueError:
                found = 0.0
            self._changed[updated_at] = found
        return found

    def __getitem__(self, name: str) -> tuple[JobSpec, float]:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found  # type: ignore[no-any-return]

    def get(self, name: str, default: Any = None) -> Any:
        # not Mapping's (a raised KeyError for each job not runnable): the fire core asks
        # once a job aligned
        entry = self.specs._entries.get(name)
        if entry is None or entry.spec is None:
            return default
        return entry.spec, self.changed(entry.updated_at)

    def __contains__(self, name: object) -> bool:
        return name in self.specs  # not Mapping's, which makes the pair to throw it away

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def items(self) -> ItemsView[str, tuple[JobSpec, float]]:
        return _FireItems(self)


# Their items in one pass over the entries (the fire core walks every job on a change)
class _SpecItems(ItemsView[str, JobSpec]):
    _mapping: RunnableSpecs

    def __iter__(self) -> Iterator[tuple[str, JobSpec]]:
        for name, entry in self._mapping._entries.items():
            if entry.spec is not None:
                yield name, entry.spec


class _FireItems(ItemsView[str, tuple[JobSpec, float]]):
    _mapping: FireTable

    def __iter__(self) -> Iterator[tuple[str, tuple[JobSpec, float]]]:
        changed = self._mapping.changed
        for name, entry in self._mapping.specs._entries.items():
            if entry.spec is not None:
                yield name, (entry.spec, changed(entry.updated_at))


UNREADABLE_KEY = "__unreadable__"


def unreadable_record(problem: str, original: object = None) -> dict[str, str]:
    """What stands in the table for a job whose stored record could not be decoded although
    its bucket could (NaN, a lone surrogate): valid JSON that `parse_stored` refuses with
    `problem`, kept as it is by later writes until `jobs apply` (or, for a function job,
    whose kind it keeps, its app) replaces it."""
    record = {UNREADABLE_KEY: problem}
    if isinstance(original, dict) and original.get("kind") == "function":
        record["kind"] = "function"
    return record


def parse_stored(stored: StoredJob, twins: SpecTwins | None = None) -> JobEntry:
    """Validate a stored record like a job file would be; a bad one disables only its job.
    `twins`: one table's read, whose records mostly share a shape (the same result)."""
    problem = name_problem(stored.name, "job name")
    if problem:
        return JobEntry(stored.name, None, problem, stored.updated_at)
    record = stored.record
    if isinstance(record, dict) and UNREADABLE_KEY in record:
        why = str(record[UNREADABLE_KEY])[:200]
        return JobEntry(stored.name, None, f"its stored record is unreadable: {why}", "")
    try:
        spec = (twins or JobSpec).from_record(stored.record)
    except JobSpecError as exc:
        text = "; ".join(str(p.message) for p in exc.problems) or str(exc)
        return JobEntry(stored.name, None, f"invalid job record: {text}", stored.updated_at)
    except Exception as exc:  # a hostile record must never take the daemon down
        return JobEntry(stored.name, None, f"invalid job record: {exc!r}", stored.updated_at)
    if spec.name != stored.name:
        return JobEntry(
            stored.name,
            None,
            f"record names job {spec.name!r}, stored as {stored.name!r}",
            stored.updated_at,
        )
    return JobEntry(stored.name, spec, None, stored.updated_at)


def parse_stored_again(
    stored: StoredJob, before: JobEntry | None, twins: SpecTwins | None = None
) -> JobEntry:
    """`parse_stored`, or the entry parsed before when the job is stored as it was (its
    record exactly what that spec writes, the same `updated_at`): a change to a large table
    rewrites most of its buckets, and a daemon keeps its specs for the jobs left as they
    were instead of a second copy of every one."""
    if (
        before is not None
        and before.spec is not None
        and before.updated_at == stored.updated_at
        and before.name == stored.name
        and stored.record == before.spec.to_record()
    ):
        return before
    return parse_stored(stored, twins)


@dataclass
class ApplyPlan:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # in the cluster, not in the file: no --prune, or a function job (the apps' to delete)
    kept: list[str] = field(default_factory=list)
    # in the file, and a function job in the cluster: never replaced by a command job
    refused: list[str] = field(default_factory=list)
    table: dict[str, StoredJob] = field(default_factory=dict)  # the table after the apply

    @property
    def changes(self) -> bool:
        return bool(self.created or self.updated or self.deleted)

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "kept": self.kept,
        }


def plan_apply(
    current: Mapping[str, StoredJob], desired: Mapping[str, JobSpec], prune: bool, now: str
) -> ApplyPlan:
    """What `jobs apply` changes to make `current` match `desired`."""
    plan = ApplyPlan()
    for name in sorted(desired):
        record = desired[name].to_record()
        old = current.get(name)
        if old is not None and is_function_job(old):
            plan.refused.append(name)  # the apps that registered it would lose it silently
            plan.table[name] = old
            continue
        if old is None:
            plan.created.append(name)
            plan.table[name] = StoredJob(name, record, now)
        elif old.record == record:
            plan.unchanged.append(name)
            plan.table[name] = old
        else:
            plan.updated.append(name)
            plan.table[name] = StoredJob(name, record, now)
    for name in sorted(set(current) - set(desired)):
        if prune and not is_function_job(current[name]):
            plan.deleted.append(name)
        else:
            plan.kept.append(name)
            plan.table[name] = current[name]
    return plan


def is_function_job(stored: StoredJob) -> bool:
    """A function job's record (registered by apps: `jobs apply --prune` leaves it)."""
    return isinstance(stored.record, dict) and stored.record.get("kind") == "function"


@dataclass
class RegisterPlan:
    """What an app's start changes in the table for the function jobs it registers."""

    created: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    # name -> what differs between the table's job and this app's (nothing was changed)
    conflicts: dict[str, str] = field(default_factory=dict)
    table: dict[str, StoredJob] = field(default_factory=dict)


def plan_register(
    current: Mapping[str, StoredJob], specs: Mapping[str, JobSpec], replace: bool, now: str
) -> RegisterPlan:
    """The table once an app's function jobs are in it. The table wins: a job there that
    differs is a conflict, unless `replace` (a deploy that changes the job); then this app's
    spec goes in, and members that registered the old one stop being given the job.
    `paused` is not part of the definition: the app's sets a new job's state, and after that
    the table's (`zksched jobs pause` / `resume`) stands, through deploys too. A command job
    of the name is a conflict even with `replace` (it is the job file's, not the apps')."""
    plan = RegisterPlan(table=dict(current))
    for name in sorted(specs):
        record = specs[name].to_record()
        old = current.get(name)
        paused = old.record.get("paused") if old is not None and is_function_job(old) else None
        if isinstance(paused, bool):
            record["paused"] = paused
        if old is not None and old.record == record:
            continue
        if old is not None and (not replace or not is_function_job(old)):
            plan.conflicts[name] = _difference(old.record, record)
            continue
        (plan.replaced if old is not None else plan.created).append(name)
        plan.table[name] = StoredJob(name, record, now)
    return plan


def _difference(stored: Any, wanted: dict[str, Any]) -> str:
    if not isinstance(stored, dict):
        return "the table's record is broken"
    if stored.get("kind") != "function":
        return (
            "the table has a command job of that name (replace=True never replaces one: "
            "rename the function, or `zksched jobs delete` the command job)"
        )
    keys = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
    return ", ".join(f"{k}: {stored.get(k)!r} in the table, {wanted.get(k)!r} here" for k in keys)
