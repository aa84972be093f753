"""The daemon's status page: plain server-rendered HTML from an immutable snapshot.

Pure: `render_status_page(snapshot)` does no I/O, so that what it shows (and what it must
never show) is unit-tested from hand-made snapshots. Everything that comes from users or
the cluster (job names, labels, schedules, errors, member ids) is escaped; job `env` values
are not part of the snapshot at all, so they cannot leak. The page refreshes itself with a
meta tag: no JavaScript, no build step, readable on a phone (viewport meta, tables that
scroll sideways inside their own box).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from zksched.core.jobtable import JobEntry
from zksched.core.owners import OwnerTable

REFRESH_SECONDS = 5


@dataclass(frozen=True)
class MemberRow:
    member_id: str
    host: str
    pid: int
    labels: Mapping[str, str]
    started_at: str
    clock_offset: float | None  # seconds, this member's clock minus ZooKeeper's; None: unknown
    owned: int  # jobs it owns in this member's owner table
    is_self: bool


@dataclass(frozen=True)
class FireResult:
    job: str
    fire_key: str
    kind: str
    status: str
    exit_code: int | None
    started_ts: float
    duration_s: float
    delay_ms: float
    fencing_token: int | None


@dataclass(frozen=True)
class JobRow:
    name: str
    schedule: str | None  # None: the stored record is invalid (see error)
    timezone: str | None
    paused: bool
    owner: str | None  # None: no eligible member
    next_fire: datetime | None
    last: Sequence[FireResult]  # newest first; only fires this member ran
    error: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SkipRow:
    at: float  # epoch seconds
    job: str
    reason: str
    count: int


@dataclass(frozen=True)
class StatusSnapshot:
    client_id: str
    member_id: str
    version: str
    generated_at: float  # epoch seconds
    connected: bool
    ready_problem: str | None  # None: ready
    health_problem: str | None  # None: healthy
    table_generation: int  # -1: the job table has not been read yet
    members: Sequence[MemberRow]
    jobs: Sequence[JobRow]
    skips: Sequence[SkipRow]  # newest first
    fires: Sequence[FireResult]  # newest first
    skip_totals: Mapping[str, int] = field(default_factory=dict)


def job_rows(
    entries: Mapping[str, JobEntry],
    table: OwnerTable,
    now: datetime,
    last: Mapping[str, Sequence[FireResult]],
) -> list[JobRow]:
    """One row per job, by name: owner from `table`, next instant after `now`. A job's `env`
    is deliberately not copied: its values may be secrets."""
    rows: list[JobRow] = []
    for name in sorted(entries):
        entry = entries[name]
        spec = entry.spec
        if spec is None:
            rows.append(JobRow(name, None, None, False, None, None, (), entry.error))
            continue
        next_fire = None
        if not spec.paused:
            try:
                next_fire = spec.schedule_obj.next_fire(now)
            except Exception:  # a schedule with no future instant (Feb 30)
                next_fire = None
        rows.append(
            JobRow(
                name=name,
                schedule=spec.schedule,
                timezone=spec.timezone,
                paused=spec.paused,
                owner=table.job_owner(name, spec),
                next_fire=next_fire,
                last=tuple(last.get(name, ())),
                labels=spec.labels,
            )
        )
    return rows


def member_rows(
    table: OwnerTable, jobs: Sequence[JobRow], self_id: str, offsets: Mapping[str, float]
) -> list[MemberRow]:
    owned: dict[str, int] = {}
    for job in jobs:
        if job.owner is not None:
            owned[job.owner] = owned.get(job.owner, 0) + 1
    return [
        MemberRow(
            member_id=m.member_id,
            host=m.host,
            pid=m.pid,
            labels=m.labels,
            started_at=m.started_at,
            clock_offset=offsets.get(m.member_id),
            owned=owned.get(m.member_id, 0),
            is_self=m.member_id == self_id,
        )
        for m in sorted(table.members, key=lambda m: m.member_id)
    ]


def e(value: object) -> str:
    """Escape for HTML text and attribute values (quotes too)."""
    return html.escape(str(value), quote=True)


def utc_text(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def relative(seconds: float) -> str:
    """`in 5s`, `3m ago`: how far `seconds` (target minus now) is from now."""
    size = abs(seconds)
    if size < 1:
        return "now"
    if size < 90:
        amount = f"{size:.0f}s"
    elif size < 90 * 60:
        amount = f"{size / 60:.0f}m"
    elif size < 36 * 3600:
        amount = f"{size / 3600:.1f}h"
    else:
        amount = f"{size / 86400:.1f}d"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


def labels_text(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def offset_text(offset: float | None) -> str:
    if offset is None:
        return "unknown"
    return f"{offset * 1000:+.0f} ms"


_CSS = """
body{font:15px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;padding:12px;
color:#1b1f24;background:#f6f7f9}
h1{font-size:1.25em;margin:0 0 4px}h2{font-size:1.05em;margin:20px 0 6px}
.meta{color:#57606a;font-size:.9em;margin-bottom:8px;overflow-wrap:anywhere}
.state{display:inline-block;padding:3px 10px;border-radius:12px;font-weight:600;margin:4px 0}
.ok{background:#dafbe1;color:#116329}.bad{background:#ffebe9;color:#a40e26}
.warn{background:#fff8c5;color:#7d4e00}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;background:#fff;border:1px solid #d0d7de;
border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:.9em}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;white-space:nowrap}td{overflow-wrap:break-word}
tr.self td:first-child{font-weight:600}.num{text-align:right;white-space:nowrap}
.r-ok{color:#116329}.r-bad{color:#a40e26}.dim{color:#57606a}
code{font-size:.95em}
@media (max-width:640px){
.scroll{overflow:visible;background:none;border:0}
table,tbody,tr,td{display:block;width:auto}thead{display:none}
tr{background:#fff;border:1px solid #d0d7de;border-radius:6px;margin:0 0 8px;padding:4px 0}
td{border:0;padding:2px 10px 2px calc(8em + 10px);position:relative;text-align:left;
min-height:1.4em}td.num{text-align:left}
td::before{content:attr(data-label);position:absolute;left:10px;width:7.5em;color:#57606a;
font-size:.85em;line-height:1.65}
td:first-child{font-weight:600;padding-left:10px}td:first-child::before{display:none}
}
"""


def _status_class(status: str) -> str:
    return "r-ok" if status == "ok" else "r-bad"


MEMBER_HEADERS = ("Member", "Host", "Labels", "Jobs", "Clock offset", "Joined")
JOB_HEADERS = ("Job", "Schedule", "Zone", "Owner", "Next fire", "Last results")
SKIP_HEADERS = ("When", "Job", "Reason", "Count")
FIRE_HEADERS = ("Fire", "Kind", "Result", "Delay", "Ran", "Token")
NUMERIC = frozenset({"Jobs", "Clock offset", "Count", "Delay", "Ran", "Token"})


def _row(headers: Sequence[str], cells: Sequence[str], cls: str = "") -> str:
    """Cells are HTML already escaped. `data-label` names each cell on a phone, where rows
    are shown as cards (see the CSS)."""
    numeric = ' class="num"'
    tds = "".join(
        f'<td data-label="{e(h)}"{numeric if h in NUMERIC else ""}>{c}</td>'
        for h, c in zip(headers, cells, strict=True)
    )
    return f'<tr class="{cls}">{tds}</tr>' if cls else f"<tr>{tds}</tr>"


def _table(headers: Sequence[str], rows: Iterable[str], empty: str) -> str:
    body = "".join(rows)
    if not body:
        return f'<p class="dim">{e(empty)}</p>'
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _result_text(result: FireResult, now: float) -> str:
    code = "" if result.exit_code is None else f" (exit {result.exit_code})"
    return (
        f'<span class="{_status_class(result.status)}">{e(result.status)}</span>{e(code)} '
        f'<span class="dim" title="{e(result.fire_key)}">'
        f"{e(relative(result.started_ts - now))}</span>"
    )


def _member_rows(snapshot: StatusSnapshot) -> Iterable[str]:
    for m in snapshot.members:
        me = " (this member)" if m.is_self else ""
        cells = [
            e(m.member_id + me),
            e(m.host),
            e(labels_text(m.labels)),
            str(m.owned),
            e(offset_text(m.clock_offset)),
            e(m.started_at),
        ]
        yield _row(MEMBER_HEADERS, cells, "self" if m.is_self else "")


def _job_rows(snapshot: StatusSnapshot) -> Iterable[str]:
    now = snapshot.generated_at
    for job in snapshot.jobs:
        if job.error is not None:
            yield (
                f'<tr><td data-label="Job">{e(job.name)}</td>'
                f'<td colspan="5" class="r-bad" data-label="Problem">'
                f"disabled: {e(job.error)}</td></tr>"
            )
            continue
        if job.paused:
            next_text = "paused"
        elif job.next_fire is None:
            next_text = "-"
        else:
            at = job.next_fire.timestamp()
            next_text = f"{utc_text(at)} ({relative(at - now)})"
        last = "<br>".join(_result_text(r, now) for r in job.last) or '<span class="dim">-</span>'
        owner = job.owner if job.owner is not None else "no eligible member"
        mine = " (this member)" if job.owner == snapshot.member_id else ""
        cells = [
            e(job.name),
            f"<code>{e(job.schedule)}</code>",
            e(job.timezone),
            e(owner + mine),
            e(next_text),
            last,
        ]
        yield _row(JOB_HEADERS, cells)


def _skip_rows(snapshot: StatusSnapshot) -> Iterable[str]:
    now = snapshot.generated_at
    for s in snapshot.skips:
        when = f'{e(utc_text(s.at))} <span class="dim">{e(relative(s.at - now))}</span>'
        yield _row(SKIP_HEADERS, [when, e(s.job), e(s.reason), str(s.count)])


def _fire_rows(snapshot: StatusSnapshot) -> Iterable[str]:
    now = snapshot.generated_at
    for f in snapshot.fires:
        token = "-" if f.fencing_token is None else str(f.fencing_token)
        cells = [
            e(f.fire_key),
            e(f.kind),
            _result_text(f, now),
            f"{f.delay_ms:.0f} ms",
            f"{f.duration_s:.2f} s",
            e(token),
        ]
        yield _row(FIRE_HEADERS, cells)


def render_status_page(snapshot: StatusSnapshot, refresh: int = REFRESH_SECONDS) -> str:
    if snapshot.ready_problem is None:
        state = '<span class="state ok">ready</span>'
    else:
        state = f'<span class="state bad">not ready: {e(snapshot.ready_problem)}</span>'
    if snapshot.health_problem is not None:
        state += f' <span class="state warn">unhealthy: {e(snapshot.health_problem)}</span>'
    mine = sum(1 for j in snapshot.jobs if j.owner == snapshot.member_id and j.error is None)
    disabled = sum(1 for j in snapshot.jobs if j.error is not None)
    totals = ", ".join(f"{r} {n}" for r, n in sorted(snapshot.skip_totals.items())) or "none"
    generation = (
        "not read yet" if snapshot.table_generation < 0 else f"gen {snapshot.table_generation}"
    )
    title = f"zksched {snapshot.client_id}: {snapshot.member_id}"
    members = _table(
        MEMBER_HEADERS,
        _member_rows(snapshot),
        "no members known (not connected to ZooKeeper yet)",
    )
    jobs = _table(JOB_HEADERS, _job_rows(snapshot), "no jobs in the job table")
    skips = _table(SKIP_HEADERS, _skip_rows(snapshot), "no skips")
    fires = _table(FIRE_HEADERS, _fire_rows(snapshot), "no fires on this member yet")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{int(refresh)}">
<title>{e(title)}</title><style>{_CSS}</style></head>
<body>
<h1>zksched cluster <span id="cluster">{e(snapshot.client_id)}</span></h1>
<div class="meta">member <b id="member">{e(snapshot.member_id)}</b> · zksched {e(snapshot.version)}
 · {e(utc_text(snapshot.generated_at))} · refreshes every {int(refresh)}s</div>
<div id="state">{state}</div>
<div class="meta">{len(snapshot.members)} members · {len(snapshot.jobs)} jobs ({e(generation)},
 {disabled} disabled) · {mine} owned here · skips since start: {e(totals)}</div>
<h2>Members</h2>
{members}
<h2>Jobs and owners</h2>
<p class="meta">Owners as this member's owner table has them; last results are the fires
this member ran.</p>
{jobs}
<h2>Recent skips</h2>
{skips}
<h2>Recent fires on this member</h2>
{fires}
</body></html>
"""
