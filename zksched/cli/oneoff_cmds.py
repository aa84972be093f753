"""`zksched jobs at WHEN NAME -- CMD…`: a one-off job, added to the cluster's job table."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import click

from zksched.cli.context import CliContext, check_acls
from zksched.cli.errors import EXIT_INVALID, CliFailure, invalid
from zksched.cli.jobs_cmds import jobs
from zksched.cli.jobview import check_job_name, zk_errors
from zksched.cli.output import say
from zksched.core.durations import parse_duration
from zksched.core.jobspec import JobSpec, JobSpecError
from zksched.core.jobtable import StoredJob
from zksched.core.names import parse_label
from zksched.core.schedule import AtError, UnknownZoneError, at_schedule, load_zone
from zksched.core.schedule.zones import ZONE_HINT
from zksched.zk.jobstore import JobStore, now_utc

T = TypeVar("T")


def _when(text: str, timezone: str, now: datetime) -> datetime:
    """WHEN: `+DURATION` from now (rounded up to a whole second), or ISO 8601 (without an
    offset it is read in --tz)."""
    if text.startswith("+"):
        try:
            seconds = parse_duration(text[1:])
        except ValueError as exc:
            raise invalid(f"WHEN {text!r}: {exc}") from None
        return datetime.fromtimestamp(math.ceil(now.timestamp() + seconds), UTC)
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise invalid(
            f"WHEN {text[:60]!r} is not +DURATION (+10m) or an ISO 8601 time such as "
            "2026-12-24T18:00:00+01:00"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=load_zone(timezone))
    return value


def _option(flag: str, parse: Callable[[str], T], text: str) -> T:
    """`parse(text)`; exit 2 naming the option when it cannot be read."""
    try:
        return parse(text)
    except ValueError as exc:
        raise invalid(f"{flag}: {exc}") from None


@jobs.command("at", context_settings={"ignore_unknown_options": True})
@click.argument("when")
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--tz",
    "timezone",
    default="UTC",
    show_default=True,
    help="The job's time zone (WHEN without an offset is read in it).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="K=V",
    help="Only members with this label may run it (repeatable).",
)
@click.option("--timeout", default=None, metavar="DURATION", help="Kill the command after this.")
@click.option(
    "--catchup-window",
    default="1h",
    show_default=True,
    metavar="DURATION",
    help="If no member was up at WHEN, run it when one comes, up to this late.",
)
@click.pass_obj
def at_command(
    ctx: CliContext,
    when: str,
    name: str,
    command: tuple[str, ...],
    timezone: str,
    labels: tuple[str, ...],
    timeout: str | None,
    catchup_window: str,
) -> None:
    """Run COMMAND once, at WHEN, on one member: `zksched jobs at +10m report -- /usr/bin/report`.

    Claimed and run like a scheduled instant (caught up within --catchup-window if no member
    was up at WHEN), then kept with its history; `jobs delete NAME` removes it.
    """
    check_job_name(name)
    try:
        load_zone(timezone)
    except UnknownZoneError as exc:
        raise invalid(f"--tz: {exc} ({ZONE_HINT})") from None
    now = datetime.now(UTC)
    instant = _when(when, timezone, now)
    try:
        schedule = at_schedule(instant)
    except AtError as exc:
        raise invalid(f"WHEN {when!r}: {exc}") from None
    label_map = dict(_option("--label", parse_label, label) for label in labels)
    try:
        spec = JobSpec(
            name=name,
            schedule=schedule,
            command=command,
            timezone=timezone,
            timeout=None if timeout is None else _option("--timeout", parse_duration, timeout),
            catchup_window=_option("--catchup-window", parse_duration, catchup_window),
            labels=label_map,
        )
    except (JobSpecError, ValueError) as exc:
        problems = exc.problems if isinstance(exc, JobSpecError) else [exc]
        raise invalid("; ".join(str(p) for p in problems)) from None
    if instant < now - timedelta(seconds=1):
        raise invalid(
            f"WHEN {instant.isoformat()} has passed (it is {now.isoformat(timespec='seconds')} "
            "now): give a time ahead, +DURATION (+10m) or ISO 8601"
        )

    def add(table: dict[str, StoredJob]) -> dict[str, StoredJob]:
        if name in table:
            raise CliFailure(
                f"a job named {name!r} exists already; pick another name, or `jobs delete` "
                "it first",
                EXIT_INVALID,
            )
        table[name] = StoredJob(name, spec.to_record(), now_utc())
        return table

    with ctx.client() as client, zk_errors():
        check_acls(ctx, client)
        JobStore(client, ctx.paths, ctx.connect_timeout).update(add)
    local = instant.astimezone(load_zone(timezone))
    say(f"{name}: runs once at {local.isoformat()} on one member")
