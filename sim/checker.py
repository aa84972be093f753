"""The SPEC's guarantees, checked against what a simulated run did.

Each check reads the ledger (what the commands did, what the job table said and when), the
sessions' expiry times and the fire records left in the ZooKeeper model. A violation names
the check, the fire key and what was seen; the runner prints it with the seed and the trace.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sim.ledger import Ledger, Run
from sim.records import decode
from sim.world import EPOCH
from sim.zkmodel import ZkModel
from zksched.core.firekey import fire_key, jitter_of, parse_utc
from zksched.core.jobspec import JobSpec
from zksched.core.retries import RETRYABLE
from zksched.core.schedule import ScheduleError

SLACK = 3.0  # how long a job table change may take to reach a connected member
WINDOW = 0.01  # between a claim's reply and its command's start (the sim's start delay)
# a claim interrupted by a loss of contact waits for the connection, then is withdrawn:
# connected this long in all (a round trip or a few retries), its member must have settled it
PARKED_WINDOW = 3.0
TRIGGER_WINDOW = 40.0  # a taken trigger runs within this long (after a run going on)


@dataclass(frozen=True)
class Violation:
    check: str
    key: str
    text: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.key}: {self.text}"


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    started: int = 0
    abandoned: int = 0
    reruns: int = 0  # at-least-once: orphaned claims run again
    skipped: Counter[str] = field(default_factory=Counter)
    expected: int = 0

    def add(self, check: str, job: str, instant: datetime | None, text: str) -> None:
        key = fire_key(job, instant) if instant is not None else job
        self.violations.append(Violation(check, key, text))


@dataclass(frozen=True)
class Limits:
    session_timeout: float
    start_grace: float  # a claim answered this long after its successor was due
    settle_from: float  # true time after which the cluster was quiet (faults over)
    end: float
    # job -> the oldest instant a live member still has in hand at the end (a catch-up of
    # a job slower than its period, say): not yet due for a record
    pending: dict[str, datetime] = field(default_factory=dict)
    orphan_interval: float = 10.0  # at-least-once: how often an owner looks for orphans


def check(ledger: Ledger, zk: ZkModel, expired_at: dict[int, float], limits: Limits) -> Verdict:
    verdict = Verdict(started=len(ledger.runs))
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in ledger.runs:
        by_job[run.job].append(run)
    _no_double(verdict, ledger, ledger.runs, expired_at)
    for job, runs in by_job.items():
        _each_run(verdict, ledger, job, runs, expired_at, limits)
        _overlap(verdict, ledger, job, runs)
        _tokens(verdict, job, runs)
    _triggers(verdict, ledger, by_job)
    _coverage(verdict, ledger, zk, expired_at, limits)
    return verdict


def _no_double(
    verdict: Verdict, ledger: Ledger, runs: list[Run], expired_at: dict[int, float]
) -> None:
    """Each fire starts once. A job with retries may run it again as the next attempt of
    the same claim (member, token) after a failed run ended, at most `retries` times in
    all; an at-least-once job, as a later attempt of a new claim (a larger token) after the
    earlier run ended and its member's session expired (its claim was an orphan)."""
    by_fire: dict[tuple[str, datetime], list[Run]] = defaultdict(list)
    for run in runs:
        by_fire[(run.job, run.instant)].append(run)
    for (job, instant), fire_runs in by_fire.items():
        if len(fire_runs) == 1 and fire_runs[0].attempt == 1:
            continue
        fire_runs.sort(key=lambda r: r.started)
        first, who = fire_runs[0], [r.member for r in fire_runs]
        specs = _specs_between(ledger, job, first.started, fire_runs[-1].started)
        redelivered = any(s.delivery == "at-least-once" for s in specs)
        verdict.reruns += first.attempt > 1  # an orphan that had never started
        for earlier, later in itertools.pairwise(fire_runs):
            ended = earlier.ended is not None and earlier.ended <= later.started
            retry = (
                later.member == earlier.member
                and later.token == earlier.token
                and later.attempt == earlier.attempt + 1
                and earlier.status in RETRYABLE
                and ended
            )
            rerun = (
                redelivered
                and later.token > earlier.token
                and later.attempt > 1  # its number counts on from the record's, if noted
                and ended
                and expired_at.get(earlier.session, float("inf")) <= later.started
            )
            if not (retry or rerun):
                verdict.add("twice", job, instant, f"started {len(fire_runs)} times, by {who}")
                break
            verdict.reruns += rerun and not retry
        else:
            # the job may have changed (or gone) meanwhile: what any table said shortly before
            retries = max((s.retries for s in specs), default=0)
            per_claim = Counter(r.token for r in fire_runs)
            if (first.attempt != 1 and not redelivered) or max(per_claim.values()) > retries + 1:
                verdict.add(
                    "retries",
                    job,
                    instant,
                    f"{len(fire_runs)} attempts (first {first.attempt}), retries {retries}",
                )


def _each_run(
    verdict: Verdict,
    ledger: Ledger,
    job: str,
    runs: list[Run],
    expired_at: dict[int, float],
    limits: Limits,
) -> None:
    for run in runs:
        if run.started >= expired_at.get(run.session, float("inf")):
            verdict.add(
                "connected", job, run.instant, f"started by {run.member} after its session expired"
            )
        silence = ledger.silence_at_start.get(id(run), 0.0)
        if silence > limits.session_timeout / 2:
            verdict.add(
                "connected",
                job,
                run.instant,
                f"started by {run.member} after {silence:.2f}s without contact",
            )
        if run.attempt > 1:
            # a retry carries on its fire's first run (the policies were that run's to obey;
            # a change the member learns of ends the retries): checked by _no_double, and
            # against the successor's due time below
            _no_backlog(verdict, ledger, job, run, limits)
            continue
        spec = _spec_at(ledger, job, run.started)
        tables = ledger.tables_between(run.started - SLACK, run.started)
        if run.kind != "trigger" and all(job not in t or t[job][0].paused for t in tables):
            verdict.add(
                "paused",
                job,
                run.instant,
                f"started by {run.member} while the job was paused or deleted",
            )
        if spec is None:
            continue
        if run.kind == "catchup":
            if spec.catchup == "none" and _steady(ledger, job, run.started, "catchup"):
                verdict.add("catchup", job, run.instant, "caught up with catchup = none")
            age = run.local_started - run.instant.timestamp()
            if age > spec.catchup_window + SLACK and _steady(
                ledger, job, run.started, "catchup_window"
            ):
                verdict.add(
                    "catchup",
                    job,
                    run.instant,
                    f"caught up {age:.1f}s late, window {spec.catchup_window}s",
                )
        _no_backlog(verdict, ledger, job, run, limits)


def _no_backlog(verdict: Verdict, ledger: Ledger, job: str, run: Run, limits: Limits) -> None:
    """overlap = skip: a scheduled instant never starts (nor is retried) after its
    successor was due."""
    spec = _spec_at(ledger, job, run.started)
    if spec is None or run.kind != "scheduled" or spec.overlap != "skip":
        return
    if _steady(ledger, job, run.started, "overlap", "schedule", "jitter"):
        deadline = _deadline(spec, run.instant)
        if run.local_started > deadline + limits.start_grace + 0.1:
            verdict.add(
                "backlog",
                job,
                run.instant,
                f"started {run.local_started - deadline:.2f}s after its successor was due",
            )


def _overlap(verdict: Verdict, ledger: Ledger, job: str, runs: list[Run]) -> None:
    ordered = sorted(runs, key=lambda r: r.started)
    for i, later in enumerate(ordered):
        spec = _spec_at(ledger, job, later.started)
        if spec is None or spec.overlap != "skip":
            continue
        if not _steady(ledger, job, later.started, "overlap"):
            continue
        for earlier in ordered[:i]:
            going = earlier.ended is None or earlier.ended > later.started
            if not going:
                continue
            earlier_spec = _spec_at(ledger, job, earlier.started)
            same = earlier.member == later.member
            # another member's run counts once it started under skip for sure (one started
            # under allow, by a member not yet told of the change, holds no lease)
            skip_then = earlier_spec is not None and earlier_spec.overlap == "skip"
            if same or (skip_then and _steady(ledger, job, earlier.started, "overlap")):
                verdict.add(
                    "overlap",
                    job,
                    later.instant,
                    f"started by {later.member} while {job}@... of {earlier.member} "
                    f"({earlier.instant:%H:%M:%S}) was running",
                )


def _tokens(verdict: Verdict, job: str, runs: list[Run]) -> None:
    """Fencing tokens are unique: each is the zxid of its own claim, so they grow with the
    order of claims (a hole caught up by a new owner gets a larger token than the newer
    instants its old owner ran: the newer owner's, as fencing needs)."""
    seen = Counter(r.token for r in runs if r.attempt == 1)  # a retry keeps its claim's
    for run in runs:
        if run.attempt == 1 and seen[run.token] > 1:
            verdict.add("tokens", job, run.instant, f"token {run.token} given twice")


def _triggers(verdict: Verdict, ledger: Ledger, by_job: dict[str, list[Run]]) -> None:
    takes_of: Counter[str] = Counter(t.job for t in ledger.takes)
    for job, runs in by_job.items():
        n = sum(1 for r in runs if r.kind == "trigger" and r.attempt == 1)
        if n > takes_of[job]:
            verdict.add("trigger", job, None, f"{n} trigger runs for {takes_of[job]} triggers")
    used: set[int] = set()
    for take in ledger.takes:
        deaths = ledger.deaths.get(take.member, [])
        if any(take.at <= d <= take.at + TRIGGER_WINDOW for d in deaths):
            continue
        if len(ledger.tables_between(take.at - SLACK, take.at + TRIGGER_WINDOW)) > 1:
            continue  # the job changed meanwhile
        spec = _spec_at(ledger, take.job, take.at)
        if spec is None or spec.schedule == "* * * * * *":
            continue  # no second is free of scheduled runs: the trigger shares one
        ran = [
            r
            for r in by_job.get(take.job, [])
            if r.kind == "trigger"
            and id(r) not in used
            and take.at <= r.started <= take.at + TRIGGER_WINDOW
        ]
        if ran:
            used.add(id(ran[0]))  # on its taker, or on a new owner it was handed back to
        else:
            verdict.add(
                "trigger", take.job, None, f"trigger {take.node} taken by {take.member} did not run"
            )


def _coverage(
    verdict: Verdict, ledger: Ledger, zk: ZkModel, expired_at: dict[int, float], limits: Limits
) -> None:
    """After the quiet end, every instant of each job's last version is covered by a record
    (a run, a recorded skip, a skip range); `running` records of dead sessions whose command
    never started are the at-most-once window (counted as abandoned)."""
    table = ledger.table_at(limits.end)
    started = {(r.job, r.instant) for r in ledger.runs}
    children: dict[str, list[str]] = defaultdict(list)
    for path in zk.node_paths():
        folder, _, name = path.rpartition("/")
        if folder.startswith("/fires/"):
            children[folder].append(name)
    for job, (spec, updated_at) in table.items():
        if spec.paused or not _has_member(ledger, spec):
            continue
        folder = f"/fires/{job}"
        records: dict[datetime, list[str]] = {}
        for name in children.get(folder, []):
            fields = decode(zk.data_of(f"{folder}/{name}"))
            records[parse_utc(name)] = fields
            verdict.skipped[fields[0] if fields[0] != "skipped" else f"skip:{fields[5]}"] += 1
            instant = parse_utc(name)
            if fields[0] == "running" and spec.delivery == "at-least-once":
                _orphan_left(verdict, ledger, job, instant, fields, expired_at, limits)
            elif fields[0] == "running" and (job, instant) not in started:
                sent = ledger.claim_sent.get((job, instant), 0.0)
                if sent < limits.end - 10.0:  # else: just claimed, maybe still settling
                    _never_started(verdict, ledger, job, instant, fields[1])
        ranges = [
            (parse_utc(f[6]), instant)
            for instant, f in records.items()
            if f[0] == "skipped" and len(f) > 6 and f[6]
        ]
        start = max(updated_at, limits.settle_from - spec.catchup_window, ledger.table_times[0])
        start = max(updated_at, ledger.table_times[0]) if spec.catchup == "all" else start
        end = limits.end - 5.0 - spec.jitter
        for instant in _instants(spec, start, end):
            if _deadline(spec, instant) > end:
                continue  # it may still wait for its job's lease
            if job in limits.pending and instant >= limits.pending[job]:
                continue  # in hand
            verdict.expected += 1
            if instant in records or any(a <= instant <= b for a, b in ranges):
                continue
            verdict.add("lost", job, instant, "no record covers it")


def _orphan_left(
    verdict: Verdict,
    ledger: Ledger,
    job: str,
    instant: datetime,
    fields: list[str],
    expired_at: dict[int, float],
    limits: Limits,
) -> None:
    """At-least-once: a record left `running` by a session that expired is an orphan, run
    again by the job's owner within `orphan_interval` (plus a takeover's time) if it is
    still inside the catch-up window then (the narrowest in force meanwhile). One left
    over that long is lost."""
    gone = expired_at.get(int(fields[2] or 0))
    if gone is None:
        return  # its claimer lives: its run (or its settling) goes on
    found_by = gone + limits.orphan_interval + limits.session_timeout + SLACK
    specs = _specs_between(ledger, job, instant.timestamp(), found_by)
    window = min((s.catchup_window for s in specs), default=0.0)
    redelivered = all(s.delivery == "at-least-once" and not s.paused for s in specs)
    if redelivered and found_by < min(limits.end - SLACK, instant.timestamp() + window):
        verdict.add(
            "lost",
            job,
            instant,
            f"orphaned by session {fields[2]} at "
            f"t+{gone - EPOCH:.3f}s (at-least-once), never run again",
        )
    else:
        verdict.abandoned += 1


def _never_started(
    verdict: Verdict, ledger: Ledger, job: str, instant: datetime, member: str
) -> None:
    """A claim left `running` whose command never started: the at-most-once window (its
    member died between the claim's reply and the start), or a claim lost by a bug."""
    claim = ledger.claims.get((job, instant))
    deaths = ledger.deaths.get(member, [])
    if claim is None:  # its reply never came back: the member died with it on the way
        if deaths:
            verdict.abandoned += 1
            return
        verdict.add("lost", job, instant, f"claimed by {member}, which lives, never settled")
        return
    if any(claim[1] <= d <= claim[1] + WINDOW for d in deaths):
        verdict.abandoned += 1
        return
    # contact lost between the claim's send and its reply: parked until connected again
    sent = ledger.claim_sent.get((job, instant), claim[1])
    if ledger.connected_for(member, sent, claim[1]) < claim[1] - sent - 1e-9 and any(
        claim[1] <= d and ledger.connected_for(member, claim[1], d) <= PARKED_WINDOW for d in deaths
    ):
        verdict.abandoned += 1
        return
    verdict.add(
        "lost",
        job,
        instant,
        f"claimed by {member} at t+{claim[1] - EPOCH:.3f}s, never started nor settled",
    )


def _instants(spec: JobSpec, start: float, end: float) -> list[datetime]:
    from datetime import UTC

    low = datetime.fromtimestamp(start, UTC)
    high = datetime.fromtimestamp(end, UTC)
    if high <= low:
        return []
    return list(spec.schedule_obj.fires_between(low, high))


def _has_member(ledger: Ledger, spec: JobSpec) -> bool:
    return any(
        all(labels.get(k) == v for k, v in spec.labels.items()) for labels in ledger.labels.values()
    )


def _specs_between(ledger: Ledger, job: str, start: float, end: float) -> list[JobSpec]:
    return [t[job][0] for t in ledger.tables_between(start - SLACK, end) if job in t]


def _spec_at(ledger: Ledger, job: str, t: float) -> JobSpec | None:
    entry = ledger.table_at(t).get(job)
    return None if entry is None else entry[0]


def _steady(ledger: Ledger, job: str, t: float, *fields: str) -> bool:
    """Whether these fields of the job stayed the same over the SLACK before `t` (a change
    takes a moment to reach every member: judged only once it has)."""
    values = set()
    for table in ledger.tables_between(t - SLACK, t):
        entry = table.get(job)
        values.add(None if entry is None else tuple(getattr(entry[0], f) for f in fields))
    return len(values) == 1


def _deadline(spec: JobSpec, instant: datetime) -> float:
    def due(i: datetime) -> float:
        return i.timestamp() + jitter_of(fire_key(spec.name, i), spec.jitter)

    try:
        successor = spec.schedule_obj.next_fire(instant)
    except ScheduleError:
        return float("inf")
    return max(due(successor), due(instant + timedelta(0)))
