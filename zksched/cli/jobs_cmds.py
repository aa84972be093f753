"""`zksched jobs …`: the cluster's job table."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import click

from zksched.cli.context import CliContext, check_acls
from zksched.cli.errors import EXIT_INVALID, CliFailure
from zksched.cli.group import cli
from zksched.cli.jobview import check_job_name, cluster, entry_of, job_row, zk_errors
from zksched.cli.output import cell, echo_json, echo_table, say
from zksched.cli.schedule_cmds import warn_passed
from zksched.core.jobspec import JobSpecError, load_job_files
from zksched.core.jobtable import UNREADABLE_KEY, StoredJob, is_function_job, plan_apply
from zksched.zk.claims import FireClaims
from zksched.zk.jobstore import (
    ConcurrentChange,
    CorruptTable,
    JobStore,
    TableRoot,
    UnreadableBuckets,
    now_utc,
)
from zksched.zk.triggers import Triggers


@cli.group()
def jobs() -> None:
    """The cluster's job table: apply a file, list, show, pause, resume, delete, trigger."""


def _table_to_replace(store: JobStore, file: str) -> tuple[TableRoot, dict[str, StoredJob]]:
    """The table an apply changes; an unreadable one (its root broken) is replaced whole:
    an apply can always repair the job table."""
    try:
        return store.read_table(whole=True)
    except CorruptTable as exc:
        say(
            f"zksched: warning: {exc}; replacing the whole table with the jobs of {file}",
            err=True,
        )
        return TableRoot(0, (), exc.version), {}
    except UnreadableBuckets as exc:  # their jobs are unknown: the file's replace them
        say(
            f"zksched: warning: {exc}; they are replaced by the jobs of {file} "
            "(any other job it held is gone)",
            err=True,
        )
        return exc.root, exc.jobs


@jobs.command()
@click.argument(
    "files", metavar="FILE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@click.option("--prune", is_flag=True, help="Delete cluster jobs that no FILE names.")
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_obj
def apply(
    ctx: CliContext, files: tuple[str, ...], prune: bool, dry_run: bool, as_json: bool
) -> None:
    """Make the cluster's job table match FILE (or several files together: their jobs as
    one table, each job in one of them), atomically (all or nothing)."""
    file = files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} other file(s)"
    try:
        desired = load_job_files(files)
    except JobSpecError as exc:
        for problem in exc.problems:
            say(str(problem), err=True)
        raise CliFailure(
            f"{file}: {len(exc.problems)} problem(s); nothing was changed", EXIT_INVALID
        ) from None
    warn_passed(file, desired)
    with ctx.client() as client, zk_errors():
        check_acls(ctx, client)
        store = JobStore(client, ctx.paths, ctx.connect_timeout)
        for _attempt in range(10):
            root, current = _table_to_replace(store, file)
            plan = plan_apply(current, desired, prune, now_utc())
            if plan.refused:
                names = ", ".join(plan.refused)
                raise CliFailure(
                    f"{file}: {names}: a function job of that name is in the cluster (apps "
                    "register it); rename the job in the file, or `zksched jobs delete` the "
                    "function job first. Nothing was changed",
                    EXIT_INVALID,
                )
            if dry_run or not plan.changes:
                break
            try:
                store.commit(root, plan.table)
                break
            except ConcurrentChange:
                continue
        else:
            raise CliFailure("the job table kept changing under us; nothing was changed")
        if not dry_run:
            claims = FireClaims(client, ctx.paths, ctx.connect_timeout)
            for name in plan.deleted:
                claims.delete_job(name)
    result = plan.to_dict()
    if as_json:
        echo_json({**result, "dry_run": dry_run})
        return
    for verb in ("created", "updated", "unchanged", "deleted"):
        for name in result[verb]:
            say(f"{'would be ' if dry_run and verb != 'unchanged' else ''}{verb:<9} {name}")
    for name in plan.kept:
        why = (
            "a function job: the apps that register it own it; `jobs delete` deletes it"
            if is_function_job(current[name])
            else "not in the file; --prune deletes it"
        )
        say(f"kept      {name} ({why})")
    summary = ", ".join(
        f"{len(result[v])} {v}" for v in ("created", "updated", "unchanged", "deleted")
    )
    say(("dry run: " if dry_run else "") + summary)


# -- reading -------------------------------------------------------------------------------


@jobs.command("list")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option("--all", "show_all", is_flag=True, help="Also one-off jobs that have run.")
@click.pass_obj
def list_jobs(ctx: CliContext, as_json: bool, show_all: bool) -> None:
    """Every job: schedule, time zone, paused, owner, next fire, last result (one-off jobs
    until they have run)."""
    with cluster(ctx) as c:
        last = c.claims.newest(list(c.entries))
        rows = [job_row(c, e, last.get(n)) for n, e in c.entries.items()]
    rows = [r for r in rows if show_all or not r["done"]]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        say(f"no jobs in cluster {ctx.client_id}")
        return
    echo_table(
        ["NAME", "KIND", "SCHEDULE", "TZ", "PAUSED", "OWNER", "NEXT", "LAST"],
        [
            [
                r["name"],
                r["kind"] or "-",
                r["schedule"] or "-",
                r["timezone"],
                r["paused"],
                r["owner"] or (f"- ({r['owner_note']})" if r["owner_note"] else None),
                r["next_fire"],
                f"INVALID: {r['error']}"
                if r["error"]
                else (f"{r['last_result']} {r['last_scheduled']}" if r["last_result"] else None),
            ]
            for r in rows
        ],
    )


@jobs.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_obj
def show(ctx: CliContext, name: str, as_json: bool) -> None:
    """One job: its definition, owner, next fires and last result."""
    check_job_name(name)  # before ZooKeeper: a bad name is bad input, reachable or not
    with cluster(ctx, only=name) as c:
        entry = entry_of(c, name)
        last = c.claims.newest([name]).get(name)
        row = job_row(c, entry, last)
        if entry.spec is not None:
            record = entry.spec.to_record()
            record.pop("format", None)
            record["env"] = {k: "***" for k in record.get("env", {})}  # values may be secrets
            row.update({k: v for k, v in record.items() if k not in row})
            try:
                upcoming, after = [], datetime.now(UTC)
                for _ in range(3):
                    after = entry.spec.schedule_obj.next_fire(after)
                    upcoming.append(after.isoformat())
                row["next_fires"] = upcoming
            except Exception:
                row["next_fires"] = []
    if as_json:
        echo_json(row)
        return
    for key in sorted(row):
        say(f"{key + ':':<16} {cell(row[key])}")


# -- changing one job ------------------------------------------------------------------------


def _change_one(ctx: CliContext, name: str, verb: str) -> None:
    check_job_name(name)
    outcome: dict[str, str] = {}

    def change(table: dict[str, StoredJob]) -> dict[str, StoredJob]:
        stored = table.get(name)
        if stored is None:
            raise CliFailure(f"no job named {name!r} in cluster {ctx.client_id}", EXIT_INVALID)
        if verb == "delete":
            del table[name]
            return table
        if not isinstance(stored.record, dict) or UNREADABLE_KEY in stored.record:
            raise CliFailure(f"job {name!r} has a malformed record; fix it with `jobs apply`")
        paused = verb == "pause"
        if bool(stored.record.get("paused", False)) == paused:
            outcome["noop"] = f"{name} is already {'paused' if paused else 'running'}"
            return table
        table[name] = StoredJob(name, {**stored.record, "paused": paused}, now_utc())
        return table

    with ctx.client() as client, zk_errors():
        check_acls(ctx, client)
        store = JobStore(client, ctx.paths, ctx.connect_timeout)
        store.update(change)
        if verb == "delete":
            FireClaims(client, ctx.paths, ctx.connect_timeout).delete_job(name)
    done = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb]
    say(outcome.get("noop") or f"{name} {done}")


@jobs.command()
@click.argument("name")
@click.pass_obj
def pause(ctx: CliContext, name: str) -> None:
    """Stop firing NAME cluster-wide (its instants are skipped as `paused`)."""
    _change_one(ctx, name, "pause")


@jobs.command()
@click.argument("name")
@click.pass_obj
def resume(ctx: CliContext, name: str) -> None:
    """Fire NAME again from its next instant (paused instants are not caught up)."""
    _change_one(ctx, name, "resume")


@jobs.command()
@click.argument("name")
@click.pass_obj
def delete(ctx: CliContext, name: str) -> None:
    """Delete NAME and its fire history."""
    _change_one(ctx, name, "delete")


@jobs.command()
@click.argument("name")
@click.pass_obj
def trigger(ctx: CliContext, name: str) -> None:
    """Run NAME once now, on its owner."""
    check_job_name(name)
    with cluster(ctx) as c:
        entry = entry_of(c, name)
        if entry.spec is None:
            raise CliFailure(f"job {name!r} is disabled: {entry.error}", EXIT_INVALID)
        owner = c.owner(entry)
        check_acls(ctx, c.client)
        Triggers(c.client, ctx.paths, ctx.connect_timeout).request(
            name, f"{socket.gethostname()}-{os.getpid()}"
        )
    if owner is None:
        say(f"triggered {name}; no eligible member is live, it runs when one joins")
    else:
        say(f"triggered {name}; its owner {owner} runs it now")
