"""The status page rendered from hand-made snapshots: what a person sees, everything that
came from users escaped, and job `env` values nowhere."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from zksched.core.jobspec import parse_job_file
from zksched.core.jobtable import JobEntry
from zksched.core.members import Member
from zksched.core.owners import OwnerTable
from zksched.runtime.status.activity import ActivityLog
from zksched.runtime.status.address import parse_http_address
from zksched.runtime.status.page import (
    FireResult,
    SkipRow,
    StatusSnapshot,
    job_rows,
    member_rows,
    relative,
    render_status_page,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EVIL = '<script>alert("x")</script>'
SECRET = "hunter2-s3cr3t"

JOBS = f"""
[jobs.backup]
schedule = "0 2 * * *"
command = ["/bin/true"]
timezone = "Europe/Berlin"
env = {{ DB_PASSWORD = "{SECRET}", LEVEL = "full" }}

[jobs.db-sync]
schedule = "*/5 * * * *"
command = ["/bin/true"]
labels = {{ role = "db" }}

[jobs.paused-one]
schedule = "* * * * *"
command = ["/bin/true"]
paused = true
"""


def entries() -> dict[str, JobEntry]:
    specs = parse_job_file(JOBS)
    out = {n: JobEntry(n, s, None, "2026-03-01T00:00:00Z") for n, s in specs.items()}
    # A hand-written record in ZooKeeper can carry any name: it is shown, disabled, escaped.
    out["x<b>y"] = JobEntry("x<b>y", None, f"schedule: bad field {EVIL}", "2026-03-01T00:00:00Z")
    return out


def members() -> OwnerTable:
    return OwnerTable(
        [
            Member("m-1", host="h1", labels={"role": "db"}, znode="m-1.0000000001"),
            Member("m-2", host="h2", labels={"zone": 'a"b<c>'}, znode="m-2.0000000002"),
        ]
    )


def result(job: str, status: str, started: float) -> FireResult:
    return FireResult(
        job=job,
        fire_key=f"{job}@2026-03-01T11:55:00Z",
        kind="scheduled",
        status=status,
        exit_code=0 if status == "ok" else 3,
        started_ts=started,
        duration_s=0.4,
        delay_ms=12.0,
        fencing_token=4242,
    )


def snapshot(**changes: object) -> StatusSnapshot:
    table = members()
    last = {"backup": [result("backup", "ok", NOW.timestamp() - 30)]}
    jobs = job_rows(entries(), table, NOW, last)
    fields: dict[str, object] = {
        "client_id": "prod",
        "member_id": "m-1",
        "version": "9.9",
        "generated_at": NOW.timestamp(),
        "connected": True,
        "ready_problem": None,
        "health_problem": None,
        "table_generation": 7,
        "members": member_rows(table, jobs, "m-1", {"m-2": 0.0125}),
        "jobs": jobs,
        "skips": [SkipRow(NOW.timestamp() - 5, "db-sync", "already-claimed", 1)],
        "fires": [result("backup", "ok", NOW.timestamp() - 30)],
        "skip_totals": {"already-claimed": 1},
    }
    fields.update(changes)
    return StatusSnapshot(**fields)  # type: ignore[arg-type]


def text_of(page: str) -> str:
    """Roughly what a person reads: tags dropped, entities left as they are."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_the_page_refreshes_itself_fits_a_phone_and_needs_no_script() -> None:
    page = render_status_page(snapshot())
    assert '<meta http-equiv="refresh" content="5">' in page
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "<script" not in page.lower()


def test_it_shows_members_owners_next_fires_last_results_and_skips() -> None:
    page = text_of(render_status_page(snapshot()))
    assert "m-1 (this member)" in page and "role=db" in page
    assert "+12 ms" in page  # m-2's clock offset
    assert "unknown" in page  # m-1's offset is not known
    # backup has no label requirement: its owner is whoever the table says, shown by id
    owner = members().owner("backup", {})
    assert f"Europe/Berlin {owner}" in page
    assert "db-sync */5 * * * * UTC m-1 (this member)" in page  # needs role=db: only m-1
    assert "2026-03-02 01:00:00Z" in page  # 02:00 Berlin (CET) is 01:00 UTC
    assert "paused" in page
    assert "ok (exit 0) 30s ago" in page
    assert "already-claimed" in page and "5s ago" in page
    assert "x&lt;b&gt;y disabled: schedule: bad field" in page
    assert "ready" in page


def test_user_input_is_escaped_everywhere() -> None:
    page = render_status_page(snapshot(client_id="c1", ready_problem=EVIL))
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # error and problem
    assert "x<b>y" not in page
    assert "zone=a&quot;b&lt;c&gt;" in page


def test_env_values_never_reach_the_page() -> None:
    snap = snapshot()
    page = render_status_page(snap)
    assert SECRET not in page
    assert SECRET not in repr(snap)  # not even in the snapshot the page is made from


def test_not_ready_and_unhealthy_are_stated() -> None:
    page = text_of(
        render_status_page(
            snapshot(
                ready_problem="not connected to ZooKeeper",
                health_problem="fire timer last beat 40s ago",
                members=[],
                jobs=[],
                skips=[],
                fires=[],
            )
        )
    )
    assert "not ready: not connected to ZooKeeper" in page
    assert "unhealthy: fire timer last beat 40s ago" in page
    assert "no members known" in page and "no jobs in the job table" in page


def test_relative_times() -> None:
    assert relative(0.4) == "now"
    assert relative(5) == "in 5s"
    assert relative(-125) == "2m ago"
    assert relative(3 * 3600) == "in 3.0h"
    assert relative(-3 * 86400) == "3.0d ago"


def test_activity_log_keeps_the_newest_few_per_job_and_forgets_deleted_jobs() -> None:
    log = ActivityLog(now=lambda: 100.0)
    for i in range(5):
        log.on_fire({"job": "a", "fire_key": f"a@{i}", "status": "ok", "started_ts": float(i)})
    log.on_fire({"job": "b", "fire_key": "b@0", "status": "failed"})
    log.on_skip("a", "paused", 2)
    last = log.last_results()
    assert [r.fire_key for r in last["a"]] == ["a@4", "a@3", "a@2"]
    fires, skips = log.recent()
    assert fires[0].fire_key == "b@0" and len(fires) == 6
    assert skips == (SkipRow(100.0, "a", "paused", 2),)
    assert log.skip_totals() == {"paused": 2}
    log.forget_jobs_except({"b"})
    assert set(log.last_results()) == {"b"}


def test_http_addresses() -> None:
    assert parse_http_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_http_address(":8080") == ("0.0.0.0", 8080)
    assert parse_http_address("[::1]:0") == ("::1", 0)
    for bad in ("9464", "host:", "host:port", "h:70000"):
        try:
            parse_http_address(bad)
        except ValueError as exc:
            assert "--http" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")
