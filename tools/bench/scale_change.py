"""The `scale` benchmark's change of membership: among the big table, probe jobs fire every
second while one member stops (SIGTERM) and a new one starts; how long each change takes to
settle in every member's table, and the probes' instants lost or doubled across them.

The probes are in the table from the first apply, paused (the idle measurement stays idle);
one apply resumes them before the changes, which are counted from the moment every probe
fires on time again, three instants in a row (their catch-up of what came due while the
members read that table belongs to the apply, not to the changes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tools.bench.daemons import BenchMember, apply_jobs, probe_job, wait_for
from tools.bench.failover import first_starts, instant_of, probe_runs
from tools.bench.members_rolling import count_probes, wait_caught_up
from tools.bench.registry import Result
from tools.bench.report import progress

PROBE_PREFIX = "probe-"


def probe_jobs(count: int, out: Path, paused: bool) -> dict[str, dict[str, Any]]:
    """`count` probe jobs (`probe_job`), paused or not."""
    return {f"{PROBE_PREFIX}{i:03d}": probe_job(out, paused=paused) for i in range(count)}


def _settled(group: Sequence[BenchMember], members: int, jobs: int) -> Callable[[], bool]:
    """Every member sees `members` members and their shares add up to `jobs`."""

    def check() -> bool:
        owned = [m.events("owned") for m in group]
        return (
            all(m.members_seen() == members for m in group)
            and all(owned)
            and (sum(int(o[-1]["owned"]) for o in owned) == jobs)
        )

    return check


def _on_time(out: Path, names: list[str], newest: int = 3) -> Callable[[], bool]:
    """Every probe's `newest` instants are consecutive and each ran within 1 s of its
    instant: the catch-up of what came due while the members read the resuming apply's
    table is over, its last runs included (one still running holds the next instant:
    `still-running`, the apply's doing, not the change's)."""

    def check() -> bool:
        for name in names:
            first = first_starts(probe_runs(out, name))
            keys = sorted(first, key=instant_of)[-newest:]
            if len(keys) < newest or instant_of(keys[-1]) - instant_of(keys[0]) != newest - 1:
                return False
            if any(first[key] - instant_of(key) > 1 for key in keys):
                return False
        return True

    return check


def _last_owned(group: Sequence[BenchMember]) -> float:
    return max(float(m.events("owned")[-1]["ts"]) for m in group)


def change_membership(
    zk: str,
    client_id: str,
    workdir: Path,
    group: list[BenchMember],
    jobs: dict[str, dict[str, Any]],
    probes: int,
    out: Path,
    start_member: Callable[[], BenchMember],
) -> Result:
    """Resume the probes (`jobs` holds them, paused; none: no apply, nothing counted), then
    SIGTERM `group[0]` and start a member in its place (`group` is changed in place); each
    change's time to settle, the probes' lost and doubled instants."""
    names = sorted(probe_jobs(probes, out, paused=False))
    resume_s = 0.0
    if probes:
        jobs.update(probe_jobs(probes, out, paused=False))
        progress(f"scale: resuming {probes} probe jobs")
        resume_s = apply_jobs(zk, client_id, workdir, jobs)
        wait_for(
            lambda: all(len(probe_runs(out, n)) >= 2 for n in names), 120, "the probes to fire"
        )
        # the change's count begins here: what the resume's catch-up skipped is not its doing
        wait_for(_on_time(out, names), 120, "the probes to catch up")
    began = time.time()
    # after the applies (each a new table generation every member reads again): what the
    # change itself adds to RSS is the difference with `rss_mb_after`
    rss_before = [round(m.rss_mb(), 1) for m in group]
    old = group[0]
    progress(f"scale: stopping {old.member_id} (SIGTERM)")
    stop_sent = time.time()
    old.stop()  # SIGTERM; SIGKILL if it has not exited 20 s later
    stopped_s = time.time() - stop_sent
    killed = old.process is not None and old.process.returncode == -9
    survivors = group[1:]
    wait_for(_settled(survivors, 2, len(jobs)), 300, "the survivors to take the stopped share")
    leave_settled_s = _last_owned(survivors) - stop_sent
    left = [
        float(e["ts"])
        for m in survivors
        for e in m.events("members")
        if float(e["ts"]) >= stop_sent and old.member_id not in e["members"]
    ]
    leave_seen_s = (min(left) if left else stop_sent) - stop_sent
    progress(f"scale: settled {leave_settled_s:.2f} s after the SIGTERM; starting a member")
    started = time.time()
    new = start_member()
    group[0] = new
    wait_for(_settled(group, 3, len(jobs)), 600, "every member to settle after the join")
    joined = [
        float(e["ts"])
        for m in survivors
        for e in m.events("members")
        if float(e["ts"]) >= started and new.member_id in e["members"]
    ]
    join_at = min(joined) if joined else started
    join_settled_s = _last_owned(group) - join_at
    ended = time.time()
    progress(f"scale: settled {join_settled_s:.2f} s after the join")
    counted: dict[str, Any] = dict.fromkeys(
        ("lost", "doubled", "instants", "late_s", "lost_records")
    )
    if probes:
        wait_caught_up(out, names)
        time.sleep(2)
        counted = count_probes(zk, client_id, out, names, began, ended)
    return {
        "probes": probes,
        "resume_apply_s": round(resume_s, 2),
        "stop_s": round(stopped_s, 2),  # SIGTERM -> the process exited
        "killed": killed,
        "leave_settled_s": round(leave_settled_s, 2),  # SIGTERM -> the last share taken
        "leave_seen_s": round(leave_seen_s, 2),  # SIGTERM -> a survivor saw the node go
        "start_to_join_s": round(join_at - started, 2),  # start -> the others see it
        "join_settled_s": round(join_settled_s, 2),  # seen -> every member's share settled
        "change_lost": counted["lost"],
        "change_doubled": counted["doubled"],
        "change_instants": counted["instants"],
        "change_late_s": counted["late_s"],
        "change_lost_records": counted["lost_records"],
        "rss_mb_before": rss_before,
    }
