"""`zksched jobs history NAME`: a job's fire records, newest first (each attempt of a retried
fire in its record's `attempts`)."""

from __future__ import annotations

from typing import Any

import click

from zksched.cli.context import CliContext
from zksched.cli.jobs_cmds import jobs
from zksched.cli.jobview import check_job_name, cluster, entry_of
from zksched.cli.output import echo_json, echo_table, say


@jobs.command()
@click.argument("name")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_obj
def history(ctx: CliContext, name: str, limit: int, as_json: bool) -> None:
    """A job's fire records, newest first."""
    check_job_name(name)  # before ZooKeeper: a bad name is bad input, reachable or not
    with cluster(ctx) as c:
        entry_of(c, name)  # exit 2 for a job that is not in the table
        instants = c.claims.instants(name)[-limit:]
        records = c.claims.read_many(name, instants)
        live = c.live_sessions
    rows = []
    for instant in reversed(instants):
        record = records.get(instant)
        if record is None:
            rows.append({"scheduled": instant, "state": "unreadable"})
            continue
        data = {k: v for k, v in record.__dict__.items() if k not in ("extra", "nonce")}
        data["state"] = record.shown_state(live)
        data["fire_key"] = record.fire_key
        rows.append(data)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        say(f"no fire records for {name}")
        return
    echo_table(
        ["SCHEDULED", "STATE", "KIND", "MEMBER", "EXIT", "STARTED", "FINISHED", "TOKEN"],
        [
            [
                r.get("scheduled"),
                _shown_state(r),
                r.get("kind"),
                r.get("member_id"),
                r.get("exit_code"),
                r.get("started_at"),
                r.get("finished_at"),
                r.get("fencing_token"),
            ]
            for r in rows
        ],
    )


def _shown_state(row: dict[str, Any]) -> str:
    """`ok`, `skipped (paused)`, `failed (attempt 3)`, `running (attempt 2)`."""
    if row.get("skip_reason"):
        return f"skipped ({row['skip_reason']})"
    attempt = row.get("attempt")
    if type(attempt) is int and attempt > 1:
        return f"{row.get('state')} (attempt {attempt})"
    return str(row.get("state"))
