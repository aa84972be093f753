"""`zksched status`: the status page's overview in a terminal, read from ZooKeeper.

Members (labels, clock offset, jobs owned), then every job with its schedule, zone, owner,
next fire and last result: one command over SSH. The reading helpers are the ones `jobs list`
and `members` use, so the three always agree.
"""

from __future__ import annotations

from typing import Any

import click

from zksched.cli.context import CliContext
from zksched.cli.group import cli
from zksched.cli.jobview import cluster, job_row
from zksched.cli.output import echo_json, echo_table, say
from zksched.zk.clocks import read_clocks


def _last_text(row: dict[str, Any]) -> str | None:
    if row["error"]:
        return f"INVALID: {row['error']}"
    if row["last_result"]:
        return f"{row['last_result']} {row['last_scheduled']}"
    return None


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output: one object.")
@click.pass_obj
def status(ctx: CliContext, as_json: bool) -> None:
    """The cluster at a glance: members, owners, next fires, last results."""
    with cluster(ctx) as c:
        last = c.claims.newest(list(c.entries))
        jobs = [job_row(c, entry, last.get(name)) for name, entry in c.entries.items()]
        member_list = list(c.members.members)
        clocks = read_clocks(c.client, c.paths, [m.member_id for m in member_list], c.timeout)
    owned: dict[str, int] = {}
    for row in jobs:
        if row["owner"] is not None:
            owned[row["owner"]] = owned.get(row["owner"], 0) + 1
    members = []
    for member in sorted(member_list, key=lambda m: m.member_id):
        record = member.to_record()
        reading = clocks.get(member.member_id)
        record["joined_at"] = record["started_at"]
        record["clock_offset_ms"] = round(reading.offset_ms, 1) if reading else None
        record["owned_jobs"] = owned.get(member.member_id, 0)
        members.append(record)
    warnings = [f"member znode {znode} ignored: {why}" for znode, why in c.members.invalid.items()]
    unowned = [r["name"] for r in jobs if r["owner"] is None and not r["error"]]
    if unowned:
        warnings.append(f"no eligible live member for {len(unowned)} job(s): {', '.join(unowned)}")
    if as_json:
        echo_json(
            {"client_id": ctx.client_id, "members": members, "jobs": jobs, "warnings": warnings}
        )
        return
    disabled = sum(1 for r in jobs if r["error"])
    say(
        f"cluster {ctx.client_id}: {len(members)} members, {len(jobs)} jobs"
        + (f" ({disabled} disabled)" if disabled else "")
    )
    say()
    if members:
        echo_table(
            ["MEMBER", "HOST", "LABELS", "JOBS", "OFFSET", "JOINED"],
            [
                [
                    m["member_id"],
                    m["host"],
                    m["labels"],
                    m["owned_jobs"],
                    None if m["clock_offset_ms"] is None else f"{m['clock_offset_ms']:+.0f}ms",
                    m["joined_at"],
                ]
                for m in members
            ],
        )
    else:
        say("no live members: nothing runs")
    say()
    if jobs:
        echo_table(
            ["JOB", "SCHEDULE", "TZ", "OWNER", "NEXT", "LAST"],
            [
                [
                    r["name"],
                    r["schedule"],
                    r["timezone"],
                    r["owner"],
                    "paused" if r["paused"] else r["next_fire"],
                    _last_text(r),
                ]
                for r in jobs
            ],
        )
    else:
        say("no jobs")
    for warning in warnings:
        say(f"warning: {warning}", err=True)
