"""`zksched audit`: check the fire records against the schedules (read-only)."""

from __future__ import annotations

from datetime import UTC, datetime

import click
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from zksched.cli.context import CliContext
from zksched.cli.errors import EXIT_FAILURE, CliFailure, invalid
from zksched.cli.group import cli
from zksched.cli.output import echo_json, echo_table, say
from zksched.core.audit import AuditReport, JobAudit, JobHistory, audit_cluster
from zksched.core.jobtable import parse_stored
from zksched.core.owners import OwnerTable
from zksched.zk.fire_reader import FireReader
from zksched.zk.jobstore import ConcurrentChange, CorruptTable, JobStore
from zksched.zk.membership import MemberReader, MemberSnapshot

SHOWN = 5  # instants listed per job and kind in the text output


def parse_since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise invalid(
            f"--since {text[:60]!r} is not an ISO 8601 time such as 2026-01-02T03:00:00Z"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # documented: a time without an offset is UTC
    return value.astimezone(UTC)


def read_cluster(ctx: CliContext) -> tuple[list[JobHistory], set[int]]:
    with ctx.client() as client:
        try:
            _, stored = JobStore(client, ctx.paths, ctx.connect_timeout).read_table()
            try:
                members = MemberReader(client, ctx.paths, ctx.connect_timeout).read()
            except NoNodeError:
                members = MemberSnapshot(())
            fires = FireReader(client, ctx.paths, ctx.connect_timeout).read_all(stored)
        except (CorruptTable, ConcurrentChange) as exc:
            raise CliFailure(f"reading the job table failed: {exc}") from None
        except (KazooException, KazooTimeoutError) as exc:
            raise CliFailure(f"ZooKeeper request failed: {type(exc).__name__}") from None
    table = OwnerTable(members.members)
    histories = []
    for name, job in sorted(stored.items()):
        entry = parse_stored(job)
        eligible = entry.spec is not None and table.job_owner(name, entry.spec) is not None
        histories.append(
            JobHistory(
                name=name,
                spec=entry.spec,
                updated_at=entry.updated_at,
                fires=fires.get(name, ()),
                eligible_now=eligible,
                error=entry.error,
            )
        )
    return histories, set(members.owners.values())


def _listed(instants: list[str]) -> str:
    shown = ", ".join(instants[:SHOWN])
    return shown + (f" … ({len(instants)} in all)" if len(instants) > SHOWN else "")


def _echo_text(report: AuditReport) -> None:
    if not report.jobs:
        say("no jobs in the table")
    else:
        echo_table(
            ["JOB", "EXPECTED", "RAN", "GAPS", "DUPLICATES", "ABANDONED", "SKIPPED", "PROBLEMS"],
            [
                [
                    j.name,
                    j.expected,
                    j.ran,
                    len(j.gaps),
                    len(j.duplicates),
                    len(j.abandoned),
                    j.skipped or None,
                    len(j.problems),
                ]
                for j in report.jobs
            ],
        )
    for job in report.jobs:
        _echo_details(job)
    totals = report.totals()
    if report.clean:
        say(
            f"audit clean: {len(report.jobs)} jobs, {totals['ran']} runs, "
            f"{totals['expected']} expected instants all covered, no duplicates"
        )
    else:
        say(
            f"audit FAILED: {totals['gaps']} gaps, {totals['duplicates']} duplicates, "
            f"{totals['abandoned']} abandoned, {totals['problems']} problems "
            f"over {len(report.jobs)} jobs"
        )


def _echo_details(job: JobAudit) -> None:
    if job.duplicates:
        say(f"{job.name}: DUPLICATE (claimed twice): {_listed(job.duplicates)}")
    if job.gaps:
        say(f"{job.name}: gap (no record covers it): {_listed(job.gaps)}")
    if job.abandoned:
        say(
            f"{job.name}: abandoned (claimed, its member died before recording a result): "
            f"{_listed(job.abandoned)}"
        )
    for problem in job.problems[:SHOWN]:
        say(f"{job.name}: {problem}")
    if len(job.problems) > SHOWN:
        say(f"{job.name}: … {len(job.problems) - SHOWN} more problems")


@cli.command()
@click.option(
    "--since",
    metavar="ISO",
    default=None,
    help="Audit instants from this time on (ISO 8601; no offset means UTC).",
)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_obj
def audit(ctx: CliContext, since: str | None, as_json: bool) -> None:
    """Check every job's fire records against its schedule; exit 0 when clean, 1 otherwise.

    Per job it reports the instants run, the expected instants no record covers (gaps),
    instants claimed more than once (duplicates: must never happen), abandoned fires, and
    skips by reason. A job's span starts at --since, at its last change (apply, pause,
    resume), and at its oldest record once history pruning may have begun, whichever is
    latest; it ends two seconds (plus the job's jitter) ago.

    Records cannot tell when members were up, so every instant of the span is expected:
    after an outage, catch-up leaves skip-range records for what it did not run, so a gap
    means an instant was lost, or that no member has taken the job over since. Jobs that no
    live member is eligible for are flagged. Read-only: safe on a production cluster.
    """
    start = parse_since(since)
    # Before reading: reading a large cluster takes seconds, and an instant that fell due
    # meanwhile may have been claimed after its job's records were read.
    now = datetime.now(UTC)
    histories, live_sessions = read_cluster(ctx)
    report = audit_cluster(histories, live_sessions, start, now)
    if as_json:
        echo_json(report.to_json())
    else:
        _echo_text(report)
    if not report.clean:
        raise click.exceptions.Exit(EXIT_FAILURE)
