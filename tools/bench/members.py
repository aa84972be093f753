"""The `members` benchmark: membership changes among many members (issue #33).

N members against the benchmark's own ZooKeeper (one server, or an ensemble of three):
N - F light members in one helper process (light_members.py: a session, a member znode and a
members watch each, no table, no commands) and F full daemons (`zksched run`). Light members
leave (their session closed) and join, one at a time; for each change, per full daemon: the
time from the change to its `members` event (seen) and to its `owned` event (table settled,
jobs moved), its CPU (/proc, less its idle rate), the jobs it took and dropped against what
the benchmark's own owner table says the change moves; in the light process: the requests
its members sent (by type), the watch notifications, when the last of them had read the
change; ZooKeeper's CPU. Then a rolling restart of the full daemons (SIGTERM,
start again, wait until it owns its share) with every-second jobs that only they may run
(`labels = {bench = "full"}`): each instant's runs counted, lost, doubled, late.

Each change is picked among 16 candidates (light members to leave, new ids to join) as one
that moves jobs to or from every full daemon, if one does: a daemon whose owned set does not
change logs no `owned` event, so its settling could not be timed. What the update costs does
not depend on it: a derived table looks at every job's entry either way.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from tools.bench.daemons import SESSION_TIMEOUT, BenchMember, apply_jobs, wait_for
from tools.bench.members_rig import JobKey, LightProcess, OwnerModel, Zookeeper, own_zookeeper
from tools.bench.members_rolling import full_member, rolling_restart
from tools.bench.registry import BenchContext, Result, at_least, benchmark
from tools.bench.report import markdown_table, percentiles, progress
from tools.bench.scale import quiet_daily_jobs
from zksched.core.owners import OwnerTable
from zksched.zk.membership import MemberReader
from zksched.zk.paths import ClusterPaths

TAIL = 1.0  # seconds of CPU counted after the last daemon settled
KINDS = ("standalone", "ensemble")


def _members_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=at_least(2), metavar="N", help="in all (300)")
    parser.add_argument("--jobs", type=at_least(1), metavar="N", help="(100000)")
    parser.add_argument("--full", type=at_least(1), metavar="N", help="full daemons (2)")
    parser.add_argument("--changes", type=at_least(1), metavar="N", help="leaves and joins (3)")
    parser.add_argument("--idle-seconds", type=at_least(1), metavar="S", help="(10)")
    parser.add_argument(
        "--zookeeper",
        choices=KINDS,
        nargs="+",
        metavar="KIND",
        help="standalone and/or ensemble (both)",
    )
    parser.add_argument(
        "--ensemble", action="store_true", help="a 3-server ensemble only (--zookeeper ensemble)"
    )
    parser.add_argument("--no-rolling", action="store_true", help="skip the rolling restart")
    parser.add_argument("--seed", type=int, default=33, help="which members leave (33)")


@benchmark(
    "members",
    help="membership changes among many members (light ones in one process, full daemons "
    "measured): settle time, CPU, jobs moved, requests; a rolling restart's lost/doubled",
    arguments=_members_arguments,
)
def bench_members(ctx: BenchContext) -> Result:
    a = ctx.args
    total = a.members or (20 if ctx.quick else 300)
    full = a.full or 2
    if full >= total:
        raise SystemExit("--full must be less than --members")
    kinds = a.zookeeper or list(KINDS)
    if a.ensemble:
        kinds = ["ensemble"]
    settings = {
        "members": total,
        "full": full,
        "jobs": a.jobs or (2_000 if ctx.quick else 100_000),
        "changes": a.changes or (1 if ctx.quick else 3),
        "idle_seconds": a.idle_seconds or (2 if ctx.quick else 10),
        "rolling": not a.no_rolling,
        "quick": ctx.quick,
        "seed": a.seed,
    }
    rows = [_one_zookeeper(kind, settings) for kind in kinds]
    _print(rows)
    return {**settings, "session_timeout_s": SESSION_TIMEOUT, "rows": rows}


def _one_zookeeper(kind: str, s: dict[str, Any]) -> Result:
    rng = random.Random(s["seed"])
    client_id = f"mb-{uuid.uuid4().hex[:8]}"
    paths = ClusterPaths(client_id)
    total, n_full, n_jobs = s["members"], s["full"], s["jobs"]
    with tempfile.TemporaryDirectory(prefix="zksched-bench-") as tmp:
        workdir = Path(tmp)
        with own_zookeeper(workdir, kind) as zk:
            progress(f"members ({kind}): applying {n_jobs:,} jobs")
            jobs = quiet_daily_jobs(n_jobs, datetime.now(UTC))
            apply_s = apply_jobs(zk.connect, client_id, workdir, jobs)
            progress(f"members ({kind}): {total - n_full} light members starting")
            t0 = time.time()
            light = LightProcess(
                zk.connect, client_id, total - n_full, workdir / "light.log", SESSION_TIMEOUT
            )
            group: list[BenchMember] = []
            observer = KazooClient(hosts=zk.connect, timeout=30)
            try:
                ready = light.next_line(900)
                light_ids: list[str] = ready["members"]
                light_ready_s = time.time() - t0
                progress(f"members ({kind}): light members ready in {light_ready_s:.1f} s")
                t1 = time.time()
                group = [full_member(zk, client_id, workdir) for _ in range(n_full)]
                wait_for(
                    lambda: all(m.members_seen() == total for m in group),
                    900,
                    "the full daemons to see every member",
                )
                observer.start(30)
                snapshot = MemberReader(observer, paths, 30).read()
                keys = [JobKey(name) for name in jobs]
                progress(f"members ({kind}): the benchmark's own table ({total} x {n_jobs:,})")
                model = OwnerModel(snapshot.members, keys)
                _wait_owned(group, model, 900)
                full_ready_s = max(float(m.events("owned")[-1]["ts"]) for m in group) - t1
                progress(f"members ({kind}): full daemons ready in {full_ready_s:.1f} s")
                idle = _idle(group, light, zk, s["idle_seconds"])
                changes = []
                joiners = (f"joiner-{n:03d}-{k:02d}" for n in range(10_000) for k in range(100))
                for _ in range(s["changes"]):
                    for change in ("leave", "join"):
                        if change == "leave":
                            candidates = [i for i in model.members if i in light_ids]
                        else:
                            candidates = [next(joiners) for _ in range(16)]
                        subject, table, moves = model.choose(
                            change, candidates, [m.member_id for m in group], rng
                        )
                        got = _change(change, subject, table, moves, group, light, zk, idle)
                        model.advance(model.with_change(change, subject), table)
                        if change == "join":
                            light_ids.append(subject)
                        changes.append(got)
                        progress(f"members ({kind}): {_one_line(got)}")
                rss = {m.member_id: round(m.rss_mb(), 1) for m in group}
                light_stats = light.ask({"cmd": "stats"})
                rolling = None
                if s["rolling"]:
                    pause = 1.0 if s["quick"] else 5.0
                    rolling = rolling_restart(
                        zk, client_id, workdir, group, model, _wait_owned, pause
                    )
            finally:
                for m in group:
                    m.stop()
                light.close()
                observer.stop()
                observer.close()
    return {
        "zookeeper": kind,
        "servers": len(zk.servers),
        "members": total,
        "full": n_full,
        "jobs": n_jobs,
        "apply_s": round(apply_s, 2),
        "light_ready_s": round(light_ready_s, 2),
        "full_ready_s": round(full_ready_s, 2),
        "idle": idle,
        "changes": changes,
        "summary": _summary(changes, n_jobs),
        "rss_mb": {"full": rss, "light_process": round(light_stats["rss_mb"], 1)},
        "light_process": {
            "threads": light_stats["threads"],
            "counts": light_stats["counts"],
        },
        "rolling": rolling,
    }


def _wait_owned(group: Sequence[BenchMember], model: OwnerModel, timeout: float) -> None:
    """Until every full daemon's latest `owned` count is its share in the model's table."""
    want = {m.member_id: model.owned(m.member_id) for m in group}

    def done() -> bool:
        for m in group:
            owned = m.events("owned")
            if not owned or int(owned[-1]["owned"]) != want[m.member_id]:
                return False
        return True

    wait_for(done, timeout, f"the full daemons to own {want}")


def _idle(group: Sequence[BenchMember], light: LightProcess, zk: Zookeeper, seconds: int) -> Result:
    """CPU per second of each full daemon, of the light process and of ZooKeeper with nothing
    changing (subtracted from each change's): the median of 1 s slices, so that a one-off
    (a full garbage collection at a quiet moment, say) does not count as the idle rate."""
    time.sleep(2)

    def sample() -> list[float]:
        return [*(m.cpu_seconds() for m in group), light.cpu_seconds(), zk.cpu_seconds()]

    slices: list[list[float]] = []
    last, at = sample(), time.monotonic()
    for _ in range(seconds):
        time.sleep(1.0)
        now, now_at = sample(), time.monotonic()
        slices.append([(b - a) / (now_at - at) for a, b in zip(last, now, strict=True)])
        last, at = now, now_at
    rates = [round(statistics.median(column), 4) for column in zip(*slices, strict=True)]
    return {
        "seconds": seconds,
        "full_cpu_per_s": rates[: len(group)],
        "light_cpu_per_s": rates[-2],
        "zookeeper_cpu_per_s": rates[-1],
        "mean_full_cpu_per_s": [
            round(statistics.fmean(column), 4) for column in list(zip(*slices, strict=True))[:-2]
        ],
    }


def _change(
    kind: str,
    subject: str,
    table: OwnerTable,
    moves: dict[str, list[int]],
    group: Sequence[BenchMember],
    light: LightProcess,
    zk: Zookeeper,
    idle: Result,
) -> Result:
    """One join or leave, measured (see the module docstring)."""
    stats0 = light.ask({"cmd": "stats"})
    cpu0 = [m.cpu_seconds() for m in group]
    light_cpu0, zk_cpu0 = light.cpu_seconds(), zk.cpu_seconds()
    began = time.time()
    reply = light.ask({"cmd": kind, "member_id": subject})
    seen: dict[str, float] = {}
    owned: dict[str, list[dict[str, Any]]] = {}
    last: dict[str, Any] = {}

    def reflected(event: dict[str, Any]) -> bool:
        return float(event["ts"]) >= reply["sent"] and (subject in event["members"]) == (
            kind == "join"
        )

    def settled() -> bool:
        for m in group:
            if m.member_id not in seen:
                found = [e for e in m.events("members") if reflected(e)]
                if not found:
                    return False
                seen[m.member_id] = float(found[0]["ts"])
            after = [e for e in m.events("owned") if float(e["ts"]) >= seen[m.member_id]]
            owned[m.member_id] = after
            want = moves.get(m.member_id, [0, 0])
            got = [sum(int(e[k]) for e in after) for k in ("taken", "dropped")]
            if got[0] < want[0] or got[1] < want[1]:
                return False
        last.update(light.ask({"cmd": "stats"})["changes"][-1])
        return last.get("last_read") is not None

    try:
        wait_for(settled, 120, f"the {kind} of {subject} to settle", interval=0.1)
        complete = True
    except TimeoutError:
        complete = False
    time.sleep(TAIL)
    took = time.time() - began
    cpu1 = [m.cpu_seconds() for m in group]
    stats1 = light.ask({"cmd": "stats"})
    light_cpu1, zk_cpu1 = light.cpu_seconds(), zk.cpu_seconds()
    change = stats1["changes"][-1]
    # the change, as first seen: its reply to the light member that made it, the first
    # watch notification in the light process, or a full daemon's `members` event
    at = min(t for t in (change["done"], change["first_notice"], *seen.values()) if t is not None)
    full = {}
    for m, c0, c1, rate in zip(group, cpu0, cpu1, idle["full_cpu_per_s"], strict=True):
        events = owned.get(m.member_id, [])
        want = moves.get(m.member_id, [0, 0])
        saw = seen.get(m.member_id)
        owned_at = float(events[0]["ts"]) if events and sum(want) else None
        between = None if owned_at is None or saw is None else round(owned_at - saw, 4)
        full[m.member_id] = {
            "seen_s": None if saw is None else round(saw - at, 4),
            "settled_s": None if owned_at is None else round(owned_at - at, 4),
            "seen_to_settled_s": between,
            "taken": sum(int(e["taken"]) for e in events),
            "dropped": sum(int(e["dropped"]) for e in events),
            "expected_taken": want[0],
            "expected_dropped": want[1],
            "cpu_s": round(c1 - c0 - rate * took, 4),
            "cpu_gross_s": round(c1 - c0, 4),
        }
    requests = {
        k: v - stats0["requests"].get(k, 0)
        for k, v in stats1["requests"].items()
        if v != stats0["requests"].get(k, 0)
    }
    counts = {
        k: v - stats0["counts"].get(k, 0)
        for k, v in stats1["counts"].items()
        if v != stats0["counts"].get(k, 0)
    }
    return {
        "kind": kind,
        "member": subject,
        "complete": complete,
        "window_s": round(took, 3),
        "moved": len(table.moved or ()),
        "members_after": len(table),
        "full": full,
        "light": {
            "members": stats1["members"],
            "first_notice_s": _since(change["first_notice"], at),
            "first_read_s": _since(change["first_read"], at),
            "all_read_s": _since(change["last_read"], at),
            "requests": requests,
            "counts": counts,
            "cpu_s": round(light_cpu1 - light_cpu0 - idle["light_cpu_per_s"] * took, 3),
        },
        "zookeeper": {"cpu_s": round(zk_cpu1 - zk_cpu0 - idle["zookeeper_cpu_per_s"] * took, 3)},
    }


def _since(t: float | None, at: float) -> float | None:
    return None if t is None else round(t - at, 4)


def _one_line(c: Result) -> str:
    per = ", ".join(
        f"settled {f['settled_s']} s cpu {f['cpu_s']:.2f} s moved {f['taken']}+{f['dropped']}"
        for f in c["full"].values()
    )
    return f"{c['kind']} {c['member']}: {c['moved']} jobs moved; {per}"


def _summary(changes: Sequence[Result], jobs: int) -> Result:
    def of(kind: str | None, key: str) -> dict[str, float]:
        values = [
            f[key]
            for c in changes
            if kind in (None, c["kind"])
            for f in c["full"].values()
            if f[key] is not None
        ]
        return percentiles(values)

    out: Result = {}
    for kind in ("leave", "join", None):
        picked = [c for c in changes if kind in (None, c["kind"])]
        light_reqs = [sum(c["light"]["requests"].values()) for c in picked]
        out[kind or "all"] = {
            "seen_s": of(kind, "seen_s"),
            "settled_s": of(kind, "settled_s"),
            "seen_to_settled_s": of(kind, "seen_to_settled_s"),
            "cpu_s": of(kind, "cpu_s"),
            "moved": percentiles([c["moved"] for c in picked]),
            "moved_per_ideal": percentiles(
                [c["moved"] / (jobs / c["members_after"]) for c in picked]
            ),
            "all_read_s": percentiles([c["light"]["all_read_s"] or 0.0 for c in picked]),
            "light_requests": percentiles(light_reqs),
            "notifications": percentiles(
                [c["light"]["counts"].get("watch notifications", 0) for c in picked]
            ),
            "full_moves_as_expected": all(
                (f["taken"], f["dropped"]) == (f["expected_taken"], f["expected_dropped"])
                for c in picked
                for f in c["full"].values()
            ),
        }
    return out


def _pair(stats: dict[str, float], digits: int = 2) -> str:
    if not stats["count"]:
        return "–"
    return f"{stats['p50']:.{digits}f} / {stats['max']:.{digits}f}"


def _print(rows: Sequence[Result]) -> None:
    table = []
    for r in rows:
        for kind in ("leave", "join"):
            got = r["summary"][kind]
            table.append(
                [
                    r["zookeeper"],
                    f"{r['members']} × {r['jobs']:,}",
                    kind,
                    str(got["moved"]["count"]),
                    _pair(got["seen_s"]),
                    _pair(got["settled_s"]),
                    _pair(got["seen_to_settled_s"]),
                    _pair(got["cpu_s"]),
                    f"{got['moved']['p50']:.0f} ({got['moved_per_ideal']['p50']:.2f})",
                    "yes" if got["full_moves_as_expected"] else "NO",
                    _pair(got["all_read_s"]),
                    f"{got['light_requests']['p50']:.0f}",
                    f"{got['notifications']['p50']:.0f}",
                ]
            )
    print(
        markdown_table(
            [
                "ZooKeeper",
                "members × jobs",
                "change",
                "n",
                "seen s p50 / max",
                "settled s p50 / max",
                "seen → settled s",
                "CPU s / daemon",
                "moved (÷ jobs/members)",
                "moves as computed",
                "all light read s",
                "light requests",
                "watch notifications",
            ],
            table,
        )
    )
    print()
    print(
        markdown_table(
            [
                "ZooKeeper",
                "full daemons: RSS MB",
                "idle CPU %",
                "light process: RSS MB",
                "threads",
                "idle CPU %",
                "ZooKeeper CPU s / change",
            ],
            [
                [
                    r["zookeeper"],
                    ", ".join(f"{v:.0f}" for v in r["rss_mb"]["full"].values()),
                    ", ".join(f"{100 * v:.1f}" for v in r["idle"]["full_cpu_per_s"]),
                    f"{r['rss_mb']['light_process']:.0f}",
                    str(r["light_process"]["threads"]),
                    f"{100 * r['idle']['light_cpu_per_s']:.1f}",
                    _pair(percentiles([c["zookeeper"]["cpu_s"] for c in r["changes"]])),
                ]
                for r in rows
            ],
        )
    )
    rolling = [r for r in rows if r["rolling"]]
    if rolling:
        print()
        print(
            markdown_table(
                [
                    "ZooKeeper",
                    "restarts",
                    "stop s (max)",
                    "ready s (max)",
                    "catch-up",
                    "instants",
                    "lost",
                    "doubled",
                    "late s p50 / max",
                    "late > 1 s",
                ],
                [
                    [
                        r["zookeeper"],
                        str(len(g["restarts"])),
                        f"{max(x['stop_s'] for x in g['restarts']):.1f}",
                        f"{max(x['ready_s'] for x in g['restarts']):.1f}",
                        policy,
                        str(p["instants"]),
                        str(p["lost"]),
                        str(p["doubled"]),
                        _pair(p["late_s"]),
                        str(p["late_over_1s"]),
                    ]
                    for r in rolling
                    for g in [r["rolling"]]
                    for policy in ("all", "latest")
                    for p in [g[f"catchup_{policy}"]]
                ],
            )
        )
