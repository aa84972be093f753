"""The evidence a chaos run is judged on: a job file whose commands record their own fire
keys, the fire log they write, the faults the suite made, and the failover time between them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from zksched.core.firekey import parse_fire_key

# Catch-up must cover every outage a scenario makes, so that span checks can be exact.
CATCHUP_WINDOW = "10m"
# One line per fire, appended by one bash `echo` (atomic for lines this short); $EPOCHREALTIME
# is bash's own clock, so recording costs no extra process.
RECORD_SCRIPT = (
    'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID $ZKSCHED_FENCING_TOKEN $EPOCHREALTIME" >> {out}'
)


def recording_jobs(
    names: Iterable[str],
    out: Path,
    *,
    schedule: str = "* * * * * *",
    overlap: str = "skip",
    history: int = 1000,
) -> str:
    """A job file: each job appends `<fire key> <member> <token> <start epoch>` to `out`."""
    script = RECORD_SCRIPT.format(out=out)
    lines = []
    for name in names:
        lines += [
            f"[jobs.{name}]",
            f'schedule = "{schedule}"',
            f"command = ['/bin/bash', '-c', '{script}']",
            'catchup = "all"',
            f'catchup_window = "{CATCHUP_WINDOW}"',
            f'overlap = "{overlap}"',
            'timeout = "30s"',
            f"history = {history}",
            "",
        ]
    return "\n".join(lines)


@dataclass(frozen=True)
class SeenFire:
    job: str
    instant: float  # epoch seconds of the scheduled instant
    member_id: str
    token: int
    started: float  # epoch seconds, the command's own clock


def read_fires(path: Path) -> list[SeenFire]:
    fires: list[SeenFire] = []
    if not path.exists():
        return fires
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue  # a line cut short by a kill: not evidence either way
        job, instant = parse_fire_key(parts[0])
        fires.append(SeenFire(job, instant.timestamp(), parts[1], int(parts[2]), float(parts[3])))
    return fires


@dataclass(frozen=True)
class FaultEvent:
    """A member stopped (graceful or not) or cut off at `at` (epoch seconds)."""

    member_id: str
    at: float
    graceful: bool


def last_firers(fires: list[SeenFire], at: float) -> dict[str, str]:
    """The member that fired each job last in the two seconds up to `at` (epoch seconds):
    its owner then, provided the job has fired since its owner last changed."""
    last: dict[str, str] = {}
    for fire in sorted(fires, key=lambda f: f.started):
        if at - 2.0 <= fire.started <= at:
            last[fire.job] = fire.member_id
    return last


def failover_time(event: FaultEvent, fires: list[SeenFire]) -> float | None:
    """How late, after the fault, the victim's jobs ran again elsewhere (the worst job).

    The victim's jobs are those whose last fire in the two seconds before the fault was its.
    For each, the first fire on another member counts from the fault, or from that fire's own
    instant when it fell due after the fault: an every-second job whose victim had just fired
    would otherwise add up to a second of waiting for its next instant to any handover.
    None when the victim was firing nothing.
    """
    last = last_firers(fires, event.at)
    victim_jobs = {job for job, member_id in last.items() if member_id == event.member_id}
    if not victim_jobs:
        return None
    worst = 0.0
    for job in victim_jobs:
        after = [
            f
            for f in fires
            if f.job == job and f.member_id != event.member_id and f.started > event.at
        ]
        if not after:
            return float("inf")
        first = min(after, key=lambda f: f.started)
        worst = max(worst, first.started - max(event.at, first.instant))
    return worst


def recorded_keys(path: Path) -> Counter[str]:
    """How often each fire key was recorded (a line cut short by a kill is left out)."""
    keys: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                keys[parts[0]] += 1
    return keys
