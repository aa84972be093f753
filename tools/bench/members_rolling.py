"""The `members` benchmark's rolling restart: each full daemon in turn stopped (SIGTERM) and
started again among the light members, while every-second jobs that only the full daemons
may run fire; every instant's runs are counted (lost, doubled, late)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.daemons import BenchMember, job_table, wait_for, zksched_cli
from tools.bench.failover import (
    _outcome,
    first_starts,
    instant_of,
    probe_records,
    probe_runs,
)
from tools.bench.members_rig import JobKey, OwnerModel, Zookeeper
from tools.bench.registry import Result
from tools.bench.report import percentiles, progress
from zksched.core.members import Member

FULL_LABELS = {"bench": "full"}
PROBES = 8  # every-second jobs only the full daemons may run


def full_member(zk: Zookeeper, client_id: str, workdir: Path) -> BenchMember:
    """A full daemon: `zksched run --label bench=full`."""
    log = workdir / f"full-{uuid.uuid4().hex[:6]}.log"
    return BenchMember(zk.connect, client_id, log, labels=FULL_LABELS).start()


def rolling_restart(
    zk: Zookeeper,
    client_id: str,
    workdir: Path,
    group: list[BenchMember],
    model: OwnerModel,
    wait_owned: Callable[[list[BenchMember], OwnerModel, float], None],
    pause: float,
) -> Result:
    out = workdir / "probes.log"
    script = f'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID $(date +%s.%N) $ZKSCHED_ATTEMPT" >> {out}'
    # half the probes catch up every instant they missed (as the failover probes: an instant
    # run late is not lost), half keep the default policy (only the latest missed instant)
    groups = {
        policy: [f"probe-{policy}-{i}" for i in range(PROBES // 2)] for policy in ("all", "latest")
    }
    names = [name for group_names in groups.values() for name in group_names]
    jobs: dict[str, dict[str, Any]] = {
        name: {
            "schedule": "* * * * * *",
            "command": ["sh", "-c", script],
            "labels": FULL_LABELS,
            **({"catchup": "all", "catchup_window": "5m"} if policy == "all" else {}),
            "history": 1000,  # every record kept: what became of a lost instant
        }
        for policy, group_names in groups.items()
        for name in group_names
    }
    path = workdir / "probes.toml"
    path.write_text(job_table(jobs))
    zksched_cli(zk.connect, client_id, "jobs", "apply", str(path))  # added; the rest stay
    model.add_jobs(JobKey(name, tuple(FULL_LABELS.items()), "sh") for name in names)
    wait_owned(group, model, 300)
    wait_for(lambda: all(len(probe_runs(out, n)) >= 2 for n in names), 60, "the probes to fire")
    began = time.time()
    restarts = []
    for i, old in enumerate(list(group)):
        old_id = old.member_id
        sent = time.time()
        old.stop()  # SIGTERM; SIGKILL if it has not exited 20 s later
        stop_s = time.time() - sent
        killed = old.process is not None and old.process.returncode == -9
        members = dict(model.members)
        del members[old_id]
        model.advance(members, model.derive(members)[0])
        new = full_member(zk, client_id, workdir)
        started = time.time()
        members[new.member_id] = Member(member_id=new.member_id, labels=FULL_LABELS)
        model.advance(members, model.derive(members)[0])
        group[i] = new
        wait_owned(group, model, 900)
        joined = [e for e in new.events("members") if new.member_id in " ".join(e["members"])]
        restarts.append(
            {
                "stopped": old_id,
                "started": new.member_id,
                "stop_s": round(stop_s, 3),
                "killed": killed,
                "joined_s": round(float(joined[0]["ts"]) - started, 3) if joined else None,
                "ready_s": round(float(new.events("owned")[-1]["ts"]) - started, 3),
            }
        )
        progress(f"members: restarted {old_id} as {new.member_id}: {restarts[-1]}")
        time.sleep(pause)
    ended = time.time()

    wait_caught_up(out, groups["all"])
    time.sleep(2)  # the default policy's latest missed instant
    result: Result = {"probes": PROBES, "restarts": restarts, "window_s": round(ended - began, 1)}
    for policy, group_names in groups.items():
        result[f"catchup_{policy}"] = count_probes(
            zk.connect, client_id, out, group_names, began, ended
        )
    return result


def wait_caught_up(out: Path, names: list[str], timeout: float = 30) -> None:
    """Wait until every instant of these probes (`catchup = "all"`) up to 2 s ago has run,
    catch-ups included; what is still missing then is counted lost."""

    def caught_up() -> bool:
        for name in names:
            instants = {instant_of(k) for k, _, _, _ in probe_runs(out, name)}
            first, last = min(instants), int(time.time()) - 2
            if len(instants & set(range(first, last + 1))) < last + 1 - first:
                return False
        return True

    with contextlib.suppress(TimeoutError):
        wait_for(caught_up, timeout, "the probes' missed instants to run")


def count_probes(
    zk: str, client_id: str, out: Path, names: list[str], began: float, ended: float
) -> Result:
    """Of the instants of these probes due between `began` and `ended`: those run, lost (with
    what the cluster recorded), doubled, and how late the first run of each started."""
    outcomes = {}
    lateness: list[float] = []
    for name in names:
        runs = probe_runs(out, name)
        got = _outcome(runs, {}, (began, ended))
        if got["lost"]:
            got = _outcome(runs, probe_records(zk, client_id, name), (began, ended))
        outcomes[name] = got
        lateness += [
            start - instant_of(key)
            for key, start in first_starts(runs).items()
            if began <= instant_of(key) <= ended
        ]
    return {
        "instants": sum(g["instants"] for g in outcomes.values()),
        "lost": sum(g["lost"] for g in outcomes.values()),
        "doubled": sum(g["doubled"] for g in outcomes.values()),
        "run_again": sum(g["run_again"] for g in outcomes.values()),
        "lost_records": {n: g["lost_records"] for n, g in outcomes.items() if g["lost"]},
        "late_s": percentiles(lateness),
        "late_over_1s": sum(1 for x in lateness if x > 1.0),
    }
