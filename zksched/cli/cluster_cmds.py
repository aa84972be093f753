"""Cluster commands: `run` (the daemon), `members`, `owners`."""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Literal

import click
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from zksched.cli.context import CliContext, check_acls
from zksched.cli.errors import EXIT_INVALID, CliFailure, invalid
from zksched.cli.group import cli
from zksched.cli.output import echo_json, echo_table, say
from zksched.core.config import pattern_problem
from zksched.core.jobtable import parse_stored
from zksched.core.names import name_problem, parse_label
from zksched.core.owners import OwnerTable
from zksched.runtime.logs import setup_logging
from zksched.runtime.status import DEFAULT_HTTP
from zksched.zk.clocks import ClockReading, read_clocks
from zksched.zk.jobstore import ConcurrentChange, CorruptTable, JobStore
from zksched.zk.membership import MemberReader, MemberSnapshot


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for text in values:
        try:
            key, value = parse_label(text)
        except ValueError as exc:
            raise invalid(f"--label: {exc}") from None
        labels[key] = value
    return labels


@cli.command()
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Member label (repeatable).")
@click.option(
    "--session-timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="ZooKeeper session timeout in seconds: a crashed member's jobs move after this long.",
)
@click.option(
    "--member-id",
    default=None,
    envvar="ZKSCHED_MEMBER_ID",
    help="Override the member id (default <hostname>-<pid>).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 4096),
    default=32,
    show_default=True,
    help="Commands this member runs at once.",
)
@click.option(
    "--on-session-loss",
    type=click.Choice(["terminate", "continue"]),
    default="terminate",
    show_default=True,
    help="What happens to a running command when the session may be lost.",
)
@click.option(
    "--stop-grace",
    type=click.FloatRange(0, 86_400),
    default=30.0,
    show_default=True,
    help="Seconds a graceful stop lets running commands finish.",
)
@click.option(
    "--allow-command",
    "allowed_commands",
    multiple=True,
    metavar="PATTERN",
    help="Only run jobs whose argv[0] matches one of these fnmatch patterns (repeatable); "
    "other jobs go to members that allow them. Default: every command.",
)
@click.option(
    "--http",
    envvar="ZKSCHED_HTTP",
    default=DEFAULT_HTTP,
    show_default=True,
    metavar="HOST:PORT",
    help='Serve /metrics (Prometheus), /healthz, /readyz and a status page at /; "" turns it off.',
)
# Hidden: skews this member's clock so that the chaos suite can test clock skew between hosts.
@click.option("--clock-offset", type=float, default=0.0, hidden=True, metavar="SECONDS")
@click.pass_obj
def run(
    ctx: CliContext,
    labels: tuple[str, ...],
    session_timeout: float,
    member_id: str | None,
    concurrency: int,
    on_session_loss: Literal["terminate", "continue"],
    stop_grace: float,
    allowed_commands: tuple[str, ...],
    http: str,
    clock_offset: float,
) -> None:
    """Run the daemon: join the cluster, keep the owner table, fire owned jobs."""
    # the daemon's modules are imported here: every other command starts faster without them
    from zksched.runtime.daemon import Daemon, DaemonConfig, default_member_id
    from zksched.runtime.status import HttpUnavailable, parse_http_address

    settings = ctx.with_session_timeout(session_timeout)
    member_labels = _labels(labels)
    for pattern in allowed_commands:
        if not pattern.strip() or any(ord(c) < 32 for c in pattern):
            raise invalid(
                f"--allow-command: {pattern!r} is not a usable pattern: give a program's full "
                "path or an fnmatch pattern of one, such as '/usr/bin/*'"
            )
        problem = pattern_problem(pattern)
        if problem is not None:
            raise invalid(f"--allow-command: {problem}")
    member_id = member_id or default_member_id()
    problem = name_problem(member_id, "member id")
    if problem:
        raise invalid(problem)
    if http:
        try:
            parse_http_address(http)
        except ValueError as exc:
            raise invalid(str(exc)) from None
    if ctx.zk.credential is not None:
        _check_acls_at_start(ctx)
    setup_logging(ctx.log_level, ctx.log_format)
    # Every ZooKeeper reply passes through kazoo's single I/O thread; with many fire threads
    # runnable, the default 5 ms GIL switch interval makes each round trip wait for it.
    sys.setswitchinterval(0.0005)
    daemon = Daemon(
        DaemonConfig(
            zk=settings,
            client_id=ctx.client_id,
            labels=member_labels,
            member_id=member_id,
            concurrency=concurrency,
            on_session_loss=on_session_loss,
            stop_grace=stop_grace,
            allowed_commands=tuple(allowed_commands) or None,
            clock_offset=clock_offset,
            http=http or None,
            steward_gc=True,
        )
    )

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        daemon.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        daemon.run()
    except HttpUnavailable as exc:  # raised before joining: nothing to undo
        raise invalid(str(exc)) from None
    sys.exit(0)


def _check_acls_at_start(ctx: CliContext) -> None:
    """With --auth, before joining: nodes others may change are refused (exit 2). When
    ZooKeeper cannot be reached yet, the daemon starts anyway (it connects when it can) and
    makes the nodes itself, with its ACL."""
    try:
        with ctx.client() as client:
            check_acls(ctx, client)
    except CliFailure as exc:
        if exc.exit_code == EXIT_INVALID:
            raise
        say(f"zksched: could not check the nodes' ACLs yet ({exc})", err=True)


def read_members(ctx: CliContext) -> tuple[MemberSnapshot, dict[str, ClockReading | None]]:
    """The live members and each one's published clock offset (None: not measured yet)."""
    with ctx.client() as client:
        try:
            snapshot = MemberReader(client, ctx.paths, ctx.connect_timeout).read()
            ids = [m.member_id for m in snapshot.members]
            return snapshot, read_clocks(client, ctx.paths, ids, ctx.connect_timeout)
        except NoNodeError:
            return MemberSnapshot(()), {}
        except (KazooException, KazooTimeoutError) as exc:
            raise CliFailure(f"reading members failed: {type(exc).__name__}") from None


def _offset_text(reading: ClockReading | None) -> str | None:
    return None if reading is None else f"{reading.offset_ms:+.0f}ms"


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.option(
    "--max-offset",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    help="Warn (on stderr) about members whose clock is further than this from ZooKeeper's, s.",
)
@click.pass_obj
def members(ctx: CliContext, as_json: bool, max_offset: float) -> None:
    """List the live members of the cluster, with each one's clock offset from ZooKeeper's
    (measured by the member every 10 s; positive = the member's clock is ahead)."""
    snapshot, clocks = read_members(ctx)
    records = [m.to_record() for m in snapshot.members]
    for record in records:
        record["joined_at"] = record["started_at"]
        reading = clocks.get(record["member_id"])
        record["clock_offset_ms"] = round(reading.offset_ms, 1) if reading else None
        record["clock_rtt_ms"] = round(reading.rtt_ms, 1) if reading else None
    if as_json:
        echo_json(records)
    elif not records:
        say(f"no live members in cluster {ctx.client_id}")
    else:
        echo_table(
            ["MEMBER", "HOST", "PID", "LABELS", "JOINED", "OFFSET", "ZNODE"],
            [
                [
                    r["member_id"],
                    r["host"],
                    r["pid"],
                    r["labels"],
                    r["joined_at"],
                    _offset_text(clocks.get(r["member_id"])),
                    r["znode"],
                ]
                for r in records
            ],
        )
    for record in records:
        offset = record["clock_offset_ms"]
        if offset is not None and abs(offset) > max_offset * 1000:
            say(
                f"warning: member {record['member_id']}'s clock is {abs(offset) / 1000:.1f}s "
                f"{'ahead of' if offset > 0 else 'behind'} ZooKeeper's "
                f"(more than --max-offset {max_offset:g}s)",
                err=True,
            )
    if as_json:
        return
    for znode, why in snapshot.invalid.items():
        say(f"warning: member znode {znode} ignored: {why}", err=True)


@cli.command()
@click.argument("jobs", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_obj
def owners(ctx: CliContext, jobs: tuple[str, ...], as_json: bool) -> None:
    """The owner table: job -> member id (every job in the table, or the JOBs named)."""
    for job in jobs:
        problem = name_problem(job, "job name")
        if problem:
            raise invalid(problem)
    with ctx.client() as client:
        try:
            snapshot = MemberReader(client, ctx.paths, ctx.connect_timeout).read()
        except NoNodeError:
            snapshot = MemberSnapshot(())
        try:
            _, stored = JobStore(client, ctx.paths, ctx.connect_timeout).read_table()
        except (KazooException, KazooTimeoutError, ConcurrentChange, CorruptTable) as exc:
            raise CliFailure(f"reading the job table failed: {exc}") from None
    entries = {name: parse_stored(job) for name, job in stored.items()}
    missing = [name for name in jobs if name not in entries]
    if missing:
        named = ", ".join(map(repr, missing))
        raise CliFailure(f"no job named {named} in cluster {ctx.client_id}", EXIT_INVALID)
    table = OwnerTable(snapshot.members)
    rows = []
    for name in list(jobs) or sorted(entries):
        spec = entries[name].spec
        owner = table.job_owner(name, spec) if spec is not None else None
        rows.append({"name": name, "owner": owner})
    if as_json:
        echo_json(rows)
        return
    echo_table(["JOB", "OWNER"], [[r["name"], r["owner"]] for r in rows])
