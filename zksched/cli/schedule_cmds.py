"""`zksched check FILE...` and `zksched next CRON`: the offline commands (no ZooKeeper needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from zksched.cli.errors import EXIT_INVALID, CliFailure, invalid
from zksched.cli.group import cli
from zksched.cli.output import say
from zksched.core.jobspec import MAX_FILE_BYTES, JobSpec, JobSpecError, load_job_files
from zksched.core.jobspec import parse_job_file as _parse_job_file
from zksched.core.jobspec.passed import passed_note
from zksched.core.schedule import Schedule, ScheduleError, UnknownZoneError, load_zone, next_fires
from zksched.core.schedule.zones import ZONE_HINT


def _load(files: tuple[str, ...]) -> tuple[str, dict[str, JobSpec]]:
    if files == ("-",):
        data = click.get_binary_stream("stdin").read(MAX_FILE_BYTES + 1)
        return "<stdin>", _parse_job_file(data, "<stdin>")
    if "-" in files:
        raise invalid("FILE: - (standard input) can only be the one FILE")
    source = files[0] if len(files) == 1 else f"{len(files)} files"
    return source, load_job_files(files)


@cli.command("check")
@click.argument("files", metavar="FILE...", nargs=-1, required=True)
def check_command(files: tuple[str, ...]) -> None:
    """Validate a job file (or several, as `jobs apply` takes them) without touching the
    cluster.

    Exit 0 when every job is valid; otherwise print every problem, one a line, naming the
    job, the field and the line, and exit 2. FILE may be - for standard input.
    """
    try:
        source, jobs = _load(files)
    except JobSpecError as exc:
        for problem in exc.problems:
            say(str(problem), err=True)
        count = len(exc.problems)
        name = "<stdin>" if files == ("-",) else files[0] if len(files) == 1 else "the files"
        raise CliFailure(
            f"{name}: {count} problem{'s' if count != 1 else ''} found",
            EXIT_INVALID,
        ) from None
    count = len(jobs)
    say(f"{source}: {count} job{'s' if count != 1 else ''} OK")
    for name, spec in jobs.items():  # what month-dependent day forms and @at mean
        for line in spec.schedule_obj.explain():
            say(f"  {name}: {line}")
    warn_passed(source, jobs)


def warn_passed(source: str, jobs: dict[str, JobSpec]) -> None:
    """A warning on stderr for each one-off job whose time has passed (valid: the exit
    status stays 0; the decorator says the same of a function's `at`)."""
    now = datetime.now(UTC)
    for name, spec in jobs.items():
        note = passed_note(spec, now)
        if note is not None:
            say(f"{source}: warning: job {name!r}, field 'at': {note}", err=True)


def _parse_after(text: str | None, timezone: str) -> datetime:
    if text is None:
        return datetime.now(load_zone(timezone))
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise invalid(
            f"--after {text[:60]!r} is not an ISO 8601 time such as 2026-01-02T03:00:00+01:00"
        ) from None
    if value.tzinfo is None:
        # A wall-clock time in --tz; in a repeated hour this is its first occurrence.
        value = value.replace(tzinfo=load_zone(timezone))
    return value


@cli.command("next")
@click.argument("cron", nargs=-1, required=True)
@click.option(
    "--tz",
    "timezone",
    default="UTC",
    show_default=True,
    help="IANA time zone the schedule is evaluated in (and the output is written in).",
)
@click.option(
    "--count",
    "-n",
    type=click.IntRange(1, 10_000),
    default=5,
    show_default=True,
    help="How many fire instants to print.",
)
@click.option(
    "--after",
    metavar="ISO",
    default=None,
    help="Start after this instant (ISO 8601, with an offset or Z; without one it is read "
    "in --tz). Default: now.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of strings.")
def next_command(
    cron: tuple[str, ...], timezone: str, count: int, after: str | None, as_json: bool
) -> None:
    """Print the next fire instants of a cron expression, one a line.

    CRON is a 5-field expression, 6 fields with seconds first, or a macro such as @daily;
    quote it (zksched next '0 2 * * *'). Instants are ISO 8601 with the zone's offset and
    follow the DST rules of docs/schedules.md.
    """
    expression = " ".join(cron)
    try:
        load_zone(timezone)
    except UnknownZoneError as exc:
        raise invalid(f"--tz: {exc} ({ZONE_HINT})") from None
    try:
        schedule = Schedule.parse(expression, timezone)
    except ScheduleError as exc:
        raise invalid(str(exc)) from None
    start = _parse_after(after, timezone)
    try:
        fires = next_fires(schedule, start, count)
    except ScheduleError as exc:
        raise invalid(str(exc)) from None
    if not fires:
        raise invalid(f"{schedule.expr!r} does not fire after {start.isoformat()}")
    zone = load_zone(timezone)
    lines = [instant.astimezone(zone).isoformat() for instant in fires]
    if as_json:
        say(json.dumps(lines))
    else:
        for line in schedule.explain():  # on stderr: the instants stay one a line on stdout
            say(f"# {line}", err=True)
        for line in lines:
            say(line)
