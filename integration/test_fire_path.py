"""The fire path end to end: every scheduled instant runs exactly once, through crashes,
restarts, partitions and skewed clocks; the job table commands; overlap and timeouts."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from integration.fires import FireLog, every_second, fire_records, recording_job, states_of
from integration.harness import SESSION_TIMEOUT, DaemonProcess, run_cli, wait_until
from tools.faultproxy import BLACKHOLE, PASS, FaultProxy
from zksched.core.firekey import fire_key, format_utc, parse_fire_key
from zksched.zk.jobstore import blob_id
from zksched.zk.paths import ClusterPaths

Start = Callable[..., DaemonProcess]


def apply(zk: str, client_id: str, path: Path, *extra: str) -> str:
    result = run_cli(zk, client_id, "jobs", "apply", str(path), *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout


def apply_ahead(zk: str, client_id: str, path: Path, write: Callable[[], datetime]) -> None:
    """Write a job file with `write` (which returns the jobs' first instant) and apply it
    before that instant, writing it again for a later one if the apply came too late: a job
    catches up nothing from before its last change, and a CLI call takes seconds on a loaded
    machine."""
    for _ in range(5):
        first = write()
        apply(zk, client_id, path)
        if time.time() < first.timestamp() - 0.5:
            return
    raise AssertionError(f"five applies each finished after the jobs' first instant ({path})")


def all_agree(daemons: list[DaemonProcess]) -> bool:
    expected = {d.member_id for d in daemons}
    return all(set(d.last_members() or ()) == expected for d in daemons)


def sleep_to_mid_second() -> None:
    """Act half-way between two whole seconds: every-second fires happen just after a whole
    second, so a kill here never lands between a claim and its command's start."""
    now = time.time()
    time.sleep((1.5 - (now % 1.0)) % 1.0)


def test_every_instant_runs_exactly_once_through_kills_and_restarts(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        "".join(
            recording_job(f"tick-{i:02d}", out, catchup="all", catchup_window="1m")
            for i in range(20)
        )
    )
    group = [daemons() for _ in range(3)]
    wait_until(lambda: all_agree(group), 20, what="cluster formed")
    apply(zk, client_id, jobfile)
    log = FireLog(out)
    log.wait_for(lambda: len(log.fire_keys()) >= 40, 20)
    start = datetime.now(UTC) + timedelta(seconds=1)

    for round_, sig in enumerate([signal.SIGKILL, signal.SIGTERM, signal.SIGKILL, signal.SIGTERM]):
        time.sleep(2)
        sleep_to_mid_second()
        victim = group.pop(round_ % len(group))
        if sig == signal.SIGKILL:
            victim.kill()
        else:
            victim.terminate()
        time.sleep(1)
        group.append(daemons())
    time.sleep(SESSION_TIMEOUT + 3)  # the last crash is taken over and caught up
    end = datetime.now(UTC) - timedelta(seconds=2)
    time.sleep(2)

    assert log.duplicates() == {}, "an instant ran twice"
    # instants leave the timer's heap ahead of time: none may start before it is due
    assert log.started_early() == []
    by_job = log.by_job()
    expected = every_second(start, end)
    for i in range(20):
        ran = set(by_job[f"tick-{i:02d}"])
        missing = [t for t in expected if t not in ran]
        if missing:
            # at most once: a kill that lands between a claim and its command's start (the
            # mid-second timing keeps it away, unless a very busy machine stretches the
            # window) loses that instant, shown as abandoned; anything else is a loss
            states = states_of(zk, client_id, f"tick-{i:02d}", missing)
            assert set(states.values()) == {"abandoned"}, f"tick-{i:02d} lost: {states}"


def test_skewed_clocks_never_run_an_instant_twice(zk: str, client_id: str, tmp_path: Path) -> None:
    from zksched.runtime.daemon import Daemon, DaemonConfig
    from zksched.zk.connection import ZkSettings

    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text("".join(recording_job(f"skew-{i}", out, catchup="all") for i in range(6)))
    apply(zk, client_id, jobfile)
    members = [
        Daemon(
            DaemonConfig(
                zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
                client_id=client_id,
                member_id=f"skewed-{i}",
                clock_offset=offset,
            )
        )
        for i, offset in enumerate([0.0, 3.0, -2.5])
    ]
    for member in members:
        member.start()
    log = FireLog(out)
    try:
        time.sleep(4)
        # ownership moves while clocks disagree: the claim must still hold
        members[0].stop()
        time.sleep(4)
        members[0] = Daemon(
            DaemonConfig(
                zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
                client_id=client_id,
                member_id="skewed-0b",
                clock_offset=1.5,
            )
        )
        members[0].start()
        time.sleep(4)
    finally:
        for member in members:
            member.stop()
    assert len(log.fire_keys()) > 30
    assert log.duplicates() == {}


def test_partitioned_member_runs_nothing_and_its_jobs_are_caught_up(
    daemons: Start,
    zk: str,
    client_id: str,
    tmp_path: Path,
    proxy_to: Callable[..., FaultProxy],
) -> None:
    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    # 24 jobs: with 9, the cut member owned none of them in ~3 % of runs ((2/3) ** 9), and
    # the test waited in vain for its first run
    jobfile.write_text(
        "".join(
            recording_job(f"p-{i:02d}", out, catchup="all", catchup_window="1m") for i in range(24)
        )
    )
    proxy = proxy_to()
    cut = daemons(zk_hosts=proxy.address)
    others = [daemons(), daemons()]
    group = [cut, *others]
    wait_until(lambda: all_agree(group), 20, what="cluster formed")
    apply(zk, client_id, jobfile)
    log = FireLog(out)
    log.wait_for(lambda: cut.member_id in {p[1] for p in log.lines()}, 20)
    start = datetime.now(UTC) + timedelta(seconds=1)

    proxy.set_mode(BLACKHOLE)
    cut_at = time.time()
    wait_until(lambda: cut.events("session-lost"), SESSION_TIMEOUT + 3, what="cut member gives up")
    gave_up = cut.events("session-lost")[0]["ts"]
    assert gave_up - cut_at < SESSION_TIMEOUT
    time.sleep(SESSION_TIMEOUT + 3)
    proxy.set_mode(PASS)
    healed_at = time.time()
    wait_until(lambda: all_agree(group), 20, what="cut member rejoined")
    time.sleep(3)
    end = datetime.now(UTC) - timedelta(seconds=2)

    # Nothing started by the cut member between giving up and healing.
    for key, member, _token, started in log.lines():
        if member == cut.member_id:
            assert not (gave_up < float(started) < healed_at), f"{key} ran while cut off"
    assert log.duplicates() == {}
    by_job = log.by_job()
    for job, ran in by_job.items():
        missing = [t for t in every_second(start, end) if t not in set(ran)]
        assert not missing, f"{job} lost: {states_of(zk, client_id, job, missing)}"


def test_job_commands_apply_pause_resume_trigger_delete(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    out = tmp_path / "fires.log"
    group = [daemons(), daemons()]
    wait_until(lambda: all_agree(group), 20, what="cluster formed")
    jobfile = tmp_path / "jobs.toml"
    # every 2 seconds so that the first instant after apply is predictable
    jobfile.write_text(recording_job("late-comer", out, schedule="*/2 * * * * *"))
    assert "created   late-comer" in apply(zk, client_id, jobfile)
    applied_at = datetime.now(UTC)  # after: no instant before the job's creation counts
    log = FireLog(out)
    log.wait_for(lambda: log.fire_keys(), 10)
    first = parse_fire_key(log.fire_keys()[0])[1]
    # its first instant after apply fired, or (a busy machine: the job reached its owner
    # late) was recorded skipped with a reason; none is left neither
    history = json.loads(run_cli(zk, client_id, "jobs", "history", "late-comer", "--json").stdout)
    recorded = {r["fire_key"]: r for r in history}
    for instant in every_second(applied_at, first):
        if instant.second % 2 == 0:
            record = recorded.get(fire_key("late-comer", instant))
            assert record is not None, f"{instant} neither ran nor was recorded"
            assert instant == first or record.get("skip_reason"), record

    listed = json.loads(run_cli(zk, client_id, "jobs", "list", "--json").stdout)
    assert listed[0]["name"] == "late-comer" and listed[0]["owner"] in {d.member_id for d in group}
    assert listed[0]["last_result"] in ("ok", "running")

    assert run_cli(zk, client_id, "jobs", "pause", "late-comer").returncode == 0
    time.sleep(1.0)
    count = len(log.fire_keys())
    time.sleep(4.5)
    assert len(log.fire_keys()) == count, "a paused job fired"

    assert run_cli(zk, client_id, "jobs", "resume", "late-comer").returncode == 0
    log.wait_for(lambda: len(log.fire_keys()) > count, 5)

    jobfile.write_text(recording_job("manual", out, schedule="0 0 1 1 *"))
    apply(zk, client_id, jobfile)  # without --prune, late-comer stays
    result = run_cli(zk, client_id, "jobs", "trigger", "manual")
    assert result.returncode == 0, result.stderr
    log.wait_for(lambda: any(k.startswith("manual@") for k in log.fire_keys()), 10)
    time.sleep(1.5)
    manual = [p for p in log.lines() if p[0].startswith("manual@")]
    assert len(manual) == 1
    owners = json.loads(run_cli(zk, client_id, "owners", "--json", "manual").stdout)
    assert manual[0][1] == owners[0]["owner"], "trigger ran elsewhere than on the owner"

    assert run_cli(zk, client_id, "jobs", "delete", "late-comer").returncode == 0
    time.sleep(1.0)
    count = len([k for k in log.fire_keys() if k.startswith("late-comer@")])
    time.sleep(3)
    assert len([k for k in log.fire_keys() if k.startswith("late-comer@")]) == count
    assert "late-comer" not in run_cli(zk, client_id, "jobs", "list").stdout


def test_overlap_skip_and_timeout(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    marker = tmp_path / "grandchild.pid"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        "[jobs.slow]\n"
        'schedule = "* * * * * *"\n'
        "command = ['sleep', '2.5']\n"
        'overlap = "skip"\n'
        "[jobs.hang]\n"
        'schedule = "*/3 * * * * *"\n'
        f"command = ['sh', '-c', 'sleep 300 & echo $! > {marker}; wait']\n"
        'timeout = "1s"\n'
    )
    daemon = daemons()
    wait_until(lambda: daemon.last_members(), 20, what="joined")
    apply(zk, client_id, jobfile)
    wait_until(
        lambda: [e for e in daemon.events("skip") if e["reason"] == "still-running"],
        10,
        what="a still-running skip",
    )
    wait_until(
        lambda: [
            e for e in daemon.events("fire") if e["job"] == "hang" and e["status"] == "timeout"
        ],
        15,
        what="the hanging job timed out",
    )
    grandchild = int(marker.read_text())
    wait_until(lambda: not Path(f"/proc/{grandchild}").exists(), 10, what="grandchild killed")

    wait_until(
        lambda: [e for e in daemon.events("fire") if e["job"] == "slow" and e["status"] == "ok"],
        15,
        what="a run of slow that finished",
    )
    history = json.loads(run_cli(zk, client_id, "jobs", "history", "slow", "--json").stdout)
    states = {r["state"] for r in history}
    assert "skipped" in states and "ok" in states
    assert any(r.get("skip_reason") == "still-running" for r in history)
    hang = json.loads(run_cli(zk, client_id, "jobs", "history", "hang", "--json").stdout)
    assert any(r["state"] == "timeout" for r in hang)


def test_bad_input_changes_nothing_and_corrupt_record_disables_one_job(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    out = tmp_path / "fires.log"
    good = tmp_path / "good.toml"
    good.write_text(recording_job("good-a", out) + recording_job("good-b", out))
    apply(zk, client_id, good)

    def table_state() -> list[tuple[object, ...]]:
        rows = json.loads(run_cli(zk, client_id, "jobs", "list", "--json").stdout)
        return [(r["name"], r["schedule"], r["updated_at"], r["error"]) for r in rows]

    before = table_state()

    bad_files = {
        "bad cron": '[jobs.x]\nschedule = "61 * * * *"\ncommand = ["true"]\n',
        "unknown zone": '[jobs.x]\nschedule = "* * * * *"\ncommand = ["true"]\n'
        'timezone = "Mars/Olympus"\n',
        "bad duration": '[jobs.x]\nschedule = "* * * * *"\ncommand = ["true"]\n'
        'timeout = "5 weeks"\n',
        "bad policy": '[jobs.x]\nschedule = "* * * * *"\ncommand = ["true"]\noverlap = "maybe"\n',
        "bad name": '[jobs."../etc"]\nschedule = "* * * * *"\ncommand = ["true"]\n',
        "unknown key": '[jobs.x]\nschedule = "* * * * *"\ncommand = ["true"]\nretrys = 3\n',
        "missing command": '[jobs.x]\nschedule = "* * * * *"\n',
        "toml syntax": '[jobs.x]\nschedule = "* * * * *\n',
    }
    for what, text in bad_files.items():
        path = tmp_path / "bad.toml"
        path.write_text(recording_job("good-a", out) + text)
        checked = run_cli(zk, client_id, "check", str(path))
        applied = run_cli(zk, client_id, "jobs", "apply", str(path), "--prune")
        assert checked.returncode == 2, what
        assert applied.returncode == 2, (what, applied.stderr)
        assert "Traceback" not in applied.stderr
        assert table_state() == before, what

    # A record written by hand that does not parse: only that job stops.
    daemon = daemons()
    wait_until(lambda: daemon.last_members(), 20, what="joined")
    log = FireLog(out)
    log.wait_for(lambda: {"good-a", "good-b"} <= set(log.by_job()), 10)
    paths = ClusterPaths(client_id)
    root = json.loads(kazoo.get(paths.jobs)[0])
    for blob in {b for b in root["buckets"] if b}:
        data = json.loads(kazoo.get(paths.blob(blob))[0])
        if "good-b" in data["jobs"]:
            data["jobs"]["good-b"]["spec"]["schedule"] = "not a cron"
            content = json.dumps(data).encode()
            handmade = blob_id(content)
            kazoo.create(paths.blob(handmade), content)
            root["buckets"] = [handmade if b == blob else b for b in root["buckets"]]
    kazoo.set(paths.jobs, json.dumps(root).encode())
    wait_until(
        lambda: [e for e in daemon.events("job-invalid") if e["job"] == "good-b"],
        5,
        what="the corrupt job reported",
    )
    time.sleep(1.5)
    count_a = len(log.by_job()["good-a"])
    count_b = len(log.by_job()["good-b"])
    time.sleep(3)
    assert len(log.by_job()["good-a"]) >= count_a + 2, "the healthy job stopped"
    assert len(log.by_job()["good-b"]) <= count_b + 1, "the corrupt job kept firing"
    listed = {
        r["name"]: r for r in json.loads(run_cli(zk, client_id, "jobs", "list", "--json").stdout)
    }
    assert listed["good-b"]["error"] and not listed["good-a"]["error"]

    # Fencing tokens grow with every fire of a job.
    tokens = [token for _, token in log.tokens("good-a")]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


CATCHUP_EXPECTED = {"all": 4, "latest": 1, "none": 0}  # instants caught up of the outage's 4


def test_catchup_policies_after_an_outage(
    zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    """One outage, a job of each catch-up policy (one outage for all three keeps the suite
    short): after it, `all` runs each missed instant (four, or more if the second daemon
    starts late), `latest` the newest only, `none` none."""
    from zksched.runtime.daemon import Daemon, DaemonConfig
    from zksched.zk.connection import ZkSettings

    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        "".join(
            recording_job(
                f"cu-{policy}", out, schedule="*/2 * * * * *", catchup=policy, catchup_window="1m"
            )
            for policy in CATCHUP_EXPECTED
        )
    )
    apply(zk, client_id, jobfile)
    settings = ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT)
    first = Daemon(DaemonConfig(zk=settings, client_id=client_id, member_id="first"))
    first.start()
    log = FireLog(out)
    log.wait_for(lambda: all(f"cu-{p}" in log.by_job() for p in CATCHUP_EXPECTED), 10)
    # Stop half-way between two instants (they fall on even seconds), so that exactly four
    # pass during the 8 s outage and none falls near its ends.
    time.sleep((3.5 - time.time() % 2.0) % 2.0)
    first.stop()
    stopped = datetime.now(UTC)
    # The second daemon finds the leases free: a lock node left behind (a session that a
    # loaded machine closed late) would make it wait, and `latest` then runs an instant
    # after the outage, not in it.
    paths = ClusterPaths(client_id)
    wait_until(
        lambda: (
            not any(
                kazoo.exists(paths.job_lock(f"cu-{p}"))
                and kazoo.get_children(paths.job_lock(f"cu-{p}"))
                for p in CATCHUP_EXPECTED
            )
        ),
        30,
        what="the first daemon's lock nodes to go",
    )
    time.sleep(max(0.0, 8.0 - (datetime.now(UTC) - stopped).total_seconds()))
    second = Daemon(DaemonConfig(zk=settings, client_id=client_id, member_id="second"))
    second.start()

    def first_scheduled(policy: str) -> datetime | None:
        """The second daemon's first instant of the job as scheduled (not caught up): the
        outage is what came before it (a busy machine starts the daemon late: longer)."""
        found = [
            parse_fire_key(record.fire_key)[1]
            for record in fire_records(kazoo, client_id, f"cu-{policy}").values()
            if record.kind == "scheduled" and record.member_id == "second"
        ]
        return min(found, default=None)

    def missed(until: datetime) -> list[str]:
        seconds = range(int(stopped.timestamp()) + 1, int(until.timestamp()))
        return [format_utc(datetime.fromtimestamp(s, UTC)) for s in seconds if s % 2 == 0]

    def caught(policy: str, until: datetime) -> list[str]:
        return sorted(
            p[0].split("@", 1)[1]
            for p in log.lines()
            if p[0].startswith(f"cu-{policy}@")
            and p[1] == "second"
            and stopped < parse_fire_key(p[0])[1] < until
        )

    def done() -> bool:
        ends = {p: first_scheduled(p) for p in CATCHUP_EXPECTED}
        until = ends["all"]
        return (
            None not in ends.values()
            and until is not None
            and caught("all", until) == missed(until)
        )

    try:
        wait_until(done, 60, interval=0.25, what="the catch-up of `all`")
    except AssertionError as exc:
        got = {p: (first_scheduled(p), log.by_job().get(f"cu-{p}")) for p in CATCHUP_EXPECTED}
        raise AssertionError(f"{exc}; the second daemon's: {got}") from None
    time.sleep(0.5)  # anything more would show up now
    second.stop()
    for policy in CATCHUP_EXPECTED:
        until = first_scheduled(policy)
        assert until is not None
        outage = missed(until)
        assert len(outage) >= CATCHUP_EXPECTED["all"]  # the 8 s outage's four, or more
        expected = {"all": outage, "latest": outage[-1:], "none": []}[policy]
        assert caught(policy, until) == expected, (policy, until)
    assert log.duplicates() == {}


@pytest.mark.parametrize("policy", ["all", "latest", "pruned"])
def test_a_takeover_fills_a_hole_behind_newer_records(
    zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient, policy: str
) -> None:
    """An instant with no record behind newer ones (a hole: hand-deleted here; a member
    whose claim's reply was lost, or whose lease take failed, and that then lost the job can
    leave one). The next owner runs it (`all`, a late claim with a larger fencing token) or
    records it skipped (`latest`), so that nothing is left neither run nor recorded; but
    never one at or before the job's pruning horizon (`pruned`: it may have run, its record
    pruned)."""
    from zksched.runtime.daemon import Daemon, DaemonConfig
    from zksched.zk.connection import ZkSettings

    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        recording_job(
            "holey",
            out,
            schedule="* * * * * *",
            catchup="all" if policy == "pruned" else policy,
            catchup_window="1m",
            history=50,
        )
    )
    apply(zk, client_id, jobfile)
    settings = ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT)
    first = Daemon(DaemonConfig(zk=settings, client_id=client_id, member_id="first"))
    first.start()
    log = FireLog(out)
    log.wait_for(lambda: len(log.fire_keys()) >= 4, 20)
    first.stop()
    paths = ClusterPaths(client_id)
    instants = sorted(kazoo.get_children(paths.job_fires("holey")))
    hole = instants[-3]  # two newer records after it
    # as if it had never been claimed nor run
    kazoo.delete(paths.fire("holey", hole))
    out.write_text("".join(line for line in out.read_text().splitlines(True) if hole not in line))
    if policy == "pruned":
        kazoo.set(paths.job_fires("holey"), json.dumps({"pruned_through": hole}).encode())

    second = Daemon(DaemonConfig(zk=settings, client_id=client_id, member_id="second"))
    second.start()
    try:
        key = f"holey@{hole}"
        if policy == "all":
            log.wait_for(lambda: any(p[0] == key and p[1] == "second" for p in log.lines()), 10)
        elif policy == "pruned":
            log.wait_for(lambda: any(p[1] == "second" for p in log.lines()), 10)
            time.sleep(1.0)  # its catch-up is done by its first fire: a hole's run shows now
            assert key not in log.fire_keys()
            assert kazoo.exists(paths.fire("holey", hole)) is None
        else:
            wait_until(
                lambda: kazoo.exists(paths.fire("holey", hole)) is not None, 10, what="a record"
            )
            raw, _ = kazoo.get(paths.fire("holey", hole))
            record = json.loads(raw)
            assert record["state"] == "skipped", record
            assert record["skip_reason"] == "outside-catchup-window", record
            assert key not in log.fire_keys()
        time.sleep(1.5)  # a second catch-up of it (another takeover) would show now
        assert log.duplicates() == {}
    finally:
        second.stop()
    if policy != "pruned":
        report = run_cli(zk, client_id, "audit", "--json")
        assert hole not in json.loads(report.stdout)["jobs"][0]["gaps"]


def test_a_catchup_of_a_rare_job_runs_every_missed_instant(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    """A job whose next fire is far off gives its lock back after each run, once the run's
    result is written. A catch-up runs the missed instants one right after the other: the
    next one must wait for that give-back, not record the job as `still-running` (which
    lost every instant after the first)."""
    from zksched.runtime.daemon import Daemon, DaemonConfig
    from zksched.zk.connection import ZkSettings

    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    instants: list[datetime] = []

    def write() -> datetime:
        while time.time() % 60 > 40:  # the three instants below stay in this minute
            time.sleep(1)
        base = datetime.now(UTC).replace(microsecond=0)
        instants[:] = [base + timedelta(seconds=s) for s in (8, 10, 12)]
        schedule = f"{','.join(str(i.second) for i in instants)} {base.minute} {base.hour} * * *"
        jobfile.write_text(recording_job("rare", out, schedule=schedule, catchup="all"))
        return instants[0]

    apply_ahead(zk, client_id, jobfile, write)
    time.sleep(max(0.0, instants[-1].timestamp() + 1 - time.time()))
    settings = ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT)
    daemon = Daemon(DaemonConfig(zk=settings, client_id=client_id, member_id="late"))
    daemon.start()
    try:
        log = FireLog(out)
        log.wait_for(lambda: len(log.fire_keys()) >= 3, 20)
        time.sleep(1)
        assert len(log.fire_keys()) == 3
        assert log.duplicates() == {}
        assert daemon.skips.counts["still-running"] == 0
    finally:
        daemon.stop()


def test_a_stop_that_terminates_runs_starts_no_waiting_fire(
    zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    """With every concurrency slot taken, a fire waits for one. A stop that runs out of
    grace terminates the running commands, which frees the slots: the waiting fire must
    not start its command then (it would outlive the member); it is recorded as not
    started."""
    from zksched.runtime.daemon import Daemon, DaemonConfig
    from zksched.zk.connection import ZkSettings

    out = tmp_path / "started.txt"
    command = f"['sh', '-c', 'echo $ZKSCHED_JOB >> {out}; exec sleep 60']"
    # caught up if the daemon is ready only after the instant (a loaded machine)
    catchup = 'catchup = "latest"\ncatchup_window = "10m"\n'

    def write() -> datetime:
        at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
        schedule = f"{at.second} {at.minute} {at.hour} * * *"
        (tmp_path / "jobs.toml").write_text(
            "".join(
                f'[jobs.{name}]\nschedule = "{schedule}"\ncommand = {command}\n'
                f'overlap = "allow"\n{catchup}'
                for name in ("first", "second")
            )
        )
        return at

    apply_ahead(zk, client_id, tmp_path / "jobs.toml", write)
    settings = ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT)
    config = DaemonConfig(
        zk=settings, client_id=client_id, member_id="m", concurrency=1, stop_grace=1.0
    )
    daemon = Daemon(config)
    daemon.start()
    wait_until(lambda: out.exists() and out.read_text().strip(), 60, what="one command started")
    time.sleep(0.5)
    assert len(out.read_text().split()) == 1  # the other waits for the only slot
    daemon.stop()
    time.sleep(1.0)
    started = out.read_text().split()
    assert len(started) == 1, started
    waited = ({"first", "second"} - set(started)).pop()
    paths = ClusterPaths(client_id)
    [instant] = kazoo.get_children(paths.job_fires(waited))
    record = json.loads(kazoo.get(paths.fire(waited, instant))[0])
    assert record["state"] == "error"
    assert "the daemon is stopping" in record["error"]
