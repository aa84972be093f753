"""`zksched jobs history NAME`: a job's fire records, newest first (each attempt of a retried
fire in its record's `attempts`)."""

from __future__ import annotations

from typing import Any

import click

from zksched.cli.context import CliContext
from zksched.cli.errors import EXIT_INVALID, CliFailure
from zksched.cli.jobs_cmds import jobs
from zksched.cli.jobview import check_job_name, cluster
from zksched.cli.output import echo_json, echo_table, say


@jobs.command()
@click.argument("name")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option(
    "--claims",
    is_flag=True,
    help="NAME is an app's claim name (Cluster.claim, the APScheduler and Celery "
    "integrations): its records, whether or not it is a job of the table.",
)
@click.pass_obj
def history(ctx: CliContext, name: str, limit: int, as_json: bool, claims: bool) -> None:
    """A job's fire records, newest first (with --claims: an app's claims under NAME)."""
    check_job_name(name)  # before ZooKeeper: a bad name is bad input, reachable or not
    with cluster(ctx, only=name) as c:
        if not claims and name not in c.entries:
            raise CliFailure(
                f"no job named {name!r} in cluster {c.paths.client_id} (the records of an "
                "app's claims under that name: add --claims)",
                EXIT_INVALID,
            )
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
