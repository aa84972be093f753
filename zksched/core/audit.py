"""The audit: what the fire records say happened, against what the schedules say should have.

Pure: the caller reads the job table, the live sessions and every job's fire records; this
module decides, per job, over an audit span:

    expected    the job's schedule instants in the span (triggers are runs, never expected)
    covered     an instant with a record at it, or inside a skip-range record's
                [extra.covers_from, scheduled]; any record at a node name covers that
                instant too (the node exists, so no member can claim it again)
    gaps        expected instants that nothing covers
    duplicates  instants that more than one record claims (by the record's own `scheduled`
                field: a record under another node name that claims a recorded instant is
                a duplicate)
    abandoned   `running` records whose member's session is gone

The span of a job starts at the latest of: --since; when the job last changed (`updated_at`:
apply, pause, resume; instants before it are not expected); and its oldest retained record
when it holds at least `history` records (older ones may have been pruned). It ends at now
minus a grace (a fire is claimed a moment after its instant) and the job's jitter.

"While an eligible member was alive": records cannot tell when members were up. The audit
expects every instant of the span; a cluster that comes back after an outage leaves
skip-range records (catch-up policy and window) that cover what it did not run, so an
instant stays a gap only when the cluster lost it, or when no member has taken the job over
since. A job that no live member is eligible for is flagged (`no eligible member now`).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from zksched.core.fire.model import FUTURE_MARGIN
from zksched.core.firekey import format_utc, parse_utc
from zksched.core.firerecord import FireRecord
from zksched.core.jobspec import JobSpec

GRACE_SECONDS = 2.0
MAX_EXPECTED = 100_000  # per job: an every-second job over a day is 86,400 instants
ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class StoredFire:
    """One fire znode as read: its name and its record (None when unreadable)."""

    node: str
    record: FireRecord | None


@dataclass(frozen=True)
class JobHistory:
    """What the audit needs of one job of the table."""

    name: str
    spec: JobSpec | None  # None: the stored record is invalid (see error)
    updated_at: str
    fires: tuple[StoredFire, ...]
    eligible_now: bool = True  # some live member's labels allow it
    error: str | None = None


@dataclass
class JobAudit:
    """One job's verdict. Its span is the instants after `since` up to `until`."""

    name: str
    since: datetime | None  # exclusive; None: the job has no bound (nothing is expected)
    until: datetime
    runs: list[str] = field(default_factory=list)
    expected: int = 0
    gaps: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return len(self.runs)

    @property
    def clean(self) -> bool:
        return not (self.gaps or self.duplicates or self.abandoned or self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "since": format_utc(self.since) if self.since else None,
            "until": format_utc(self.until),
            "ran": self.ran,
            "ran_instants": list(self.runs),
            "expected": self.expected,
            "gaps": list(self.gaps),
            "duplicates": list(self.duplicates),
            "abandoned": list(self.abandoned),
            "skipped": dict(sorted(self.skipped.items())),
            "problems": list(self.problems),
            "clean": self.clean,
        }


@dataclass
class AuditReport:
    since: datetime  # exclusive, like JobAudit.since
    until: datetime
    jobs: list[JobAudit]

    @property
    def clean(self) -> bool:
        return all(job.clean for job in self.jobs)

    def totals(self) -> dict[str, Any]:
        skipped: Counter[str] = Counter()
        for job in self.jobs:
            skipped.update(job.skipped)
        return {
            "ran": sum(j.ran for j in self.jobs),
            "expected": sum(j.expected for j in self.jobs),
            "gaps": sum(len(j.gaps) for j in self.jobs),
            "duplicates": sum(len(j.duplicates) for j in self.jobs),
            "abandoned": sum(len(j.abandoned) for j in self.jobs),
            "skipped": dict(sorted(skipped.items())),
            "problems": sum(len(j.problems) for j in self.jobs),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "since": format_utc(self.since),
            "until": format_utc(self.until),
            "clean": self.clean,
            "jobs": [job.to_json() for job in self.jobs],
            "totals": self.totals(),
        }


def _instant(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_utc(text)
    except ValueError:
        return None


def span_start(history: JobHistory, since: datetime | None) -> datetime | None:
    """The exclusive lower bound of the job's span (instants strictly after it count)."""
    bounds: list[datetime] = []
    if since is not None:
        bounds.append(since - timedelta(microseconds=1))  # --since itself is inside the span
    updated = _instant(history.updated_at)
    if updated is not None:
        bounds.append(updated)  # the instant of the change itself was not due any more
    spec = history.spec
    if spec is not None and len(history.fires) >= max(1, spec.history):
        oldest = min((_instant(f.node) for f in history.fires), key=_sort_key, default=None)
        if oldest is not None:
            bounds.append(oldest - ONE_SECOND)  # the oldest record is inside the span
    return max(bounds) if bounds else None


def _sort_key(value: datetime | None) -> datetime:
    return value if value is not None else datetime.max.replace(tzinfo=UTC)


def covered_intervals(fires: tuple[StoredFire, ...]) -> list[tuple[datetime, datetime]]:
    """Merged, sorted [first, last] intervals of instants that records cover."""
    raw: list[tuple[datetime, datetime]] = []
    for fire in fires:
        node_instant = _instant(fire.node)
        if node_instant is not None:
            raw.append((node_instant, node_instant))
        record = well_formed(fire.record)
        if record is None:
            continue
        scheduled = _instant(record.scheduled)
        if scheduled is None:
            continue
        first = _instant(record.extra.get("covers_from")) if record.state == "skipped" else None
        if first is None or first > scheduled:
            first = scheduled
        raw.append((first, scheduled))
    raw.sort()
    merged: list[tuple[datetime, datetime]] = []
    for first, last in raw:
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def uncovered(
    instants: list[datetime], intervals: list[tuple[datetime, datetime]]
) -> list[datetime]:
    """The instants (ascending) that no interval (merged, sorted) contains."""
    out: list[datetime] = []
    index = 0
    for instant in instants:
        while index < len(intervals) and intervals[index][1] < instant:
            index += 1
        if index < len(intervals) and intervals[index][0] <= instant:
            continue
        out.append(instant)
    return out


def well_formed(record: FireRecord | None) -> FireRecord | None:
    """The record if its fields have the types the audit relies on (hand-written or corrupt
    records may not), else None: it is then treated as unreadable."""
    if record is None:
        return None
    # Typed as object: from_json takes stored JSON as it comes.
    strings: tuple[object, ...] = (record.job, record.scheduled, record.state, record.member_id)
    session: object = record.session
    extra: object = record.extra
    reason: object = record.skip_reason
    if not all(isinstance(v, str) for v in strings):
        return None
    if not isinstance(session, int) or not isinstance(extra, dict):
        return None
    if reason is not None and not isinstance(reason, str):
        return None
    return record


def _skip_count(record: FireRecord) -> int:
    count = record.extra.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return count
    return 1


def audit_job(
    history: JobHistory, live_sessions: set[int], since: datetime | None, now: datetime
) -> JobAudit:
    spec = history.spec
    jitter = spec.jitter if spec is not None else 0.0
    until = now - timedelta(seconds=GRACE_SECONDS + jitter)
    start = span_start(history, since)
    result = JobAudit(history.name, start, until)
    if spec is None:
        result.problems.append(f"job disabled: {history.error or 'invalid record'}")
    elif not history.eligible_now and not spec.paused:
        result.problems.append("no eligible member now: nothing runs this job")
    if _instant(history.updated_at) is None:
        result.problems.append(f"job has no valid updated_at ({history.updated_at!r:.40})")

    # What the records say.
    claims: dict[datetime, int] = defaultdict(int)
    for fire in sorted(history.fires, key=lambda f: f.node):
        record = well_formed(fire.record)
        if record is None:
            result.problems.append(f"unreadable fire record {fire.node!r:.60}")
            continue
        scheduled = _instant(record.scheduled)
        if scheduled is None:
            result.problems.append(f"fire record {fire.node!r:.60} has no valid scheduled instant")
            continue
        if record.scheduled != fire.node:
            result.problems.append(
                f"fire record {fire.node!r:.60} claims instant {record.scheduled}"
            )
        if record.job != history.name:
            result.problems.append(f"fire record {fire.node!r:.60} names job {record.job!r:.60}")
        if scheduled > now + timedelta(seconds=FUTURE_MARGIN):
            result.problems.append(
                f"fire record {fire.node!r:.60} is from the future: the daemons ignore it"
            )
            continue
        if start is not None and scheduled <= start:
            continue
        claims[scheduled] += 1
        if scheduled > until:
            continue  # after the span (the grace): counted next time, like its instant
        if record.state == "skipped":
            reason = record.skip_reason or "unknown"
            result.skipped[reason] = result.skipped.get(reason, 0) + _skip_count(record)
            if "covers_from" in record.extra and _instant(record.extra["covers_from"]) is None:
                result.problems.append(f"skip range {fire.node!r:.60} has a bad covers_from")
        elif record.shown_state(live_sessions) == "abandoned":
            result.abandoned.append(record.scheduled)
        else:
            result.runs.append(record.scheduled)
    result.duplicates = [format_utc(t) for t, n in sorted(claims.items()) if n > 1]
    result.runs.sort()
    result.abandoned.sort()

    # What the schedule says.
    if spec is None or spec.paused or start is None or start >= until:
        return result
    instants = list(
        itertools.islice(spec.schedule_obj.fires_between(start, until), MAX_EXPECTED + 1)
    )
    if len(instants) > MAX_EXPECTED:
        instants = instants[:MAX_EXPECTED]
        result.problems.append(
            f"audit span truncated to its first {MAX_EXPECTED} instants; use --since"
        )
    result.expected = len(instants)
    result.gaps = [format_utc(t) for t in uncovered(instants, covered_intervals(history.fires))]
    return result


def audit_cluster(
    histories: list[JobHistory],
    live_sessions: set[int],
    since: datetime | None,
    now: datetime,
) -> AuditReport:
    jobs = [
        audit_job(h, live_sessions, since, now) for h in sorted(histories, key=lambda h: h.name)
    ]
    until = now - timedelta(seconds=GRACE_SECONDS)
    starts = [j.since for j in jobs if j.since is not None]
    if since is not None:
        overall = since - timedelta(microseconds=1)
    else:
        overall = min(starts) if starts else until
    return AuditReport(overall, until, jobs)
