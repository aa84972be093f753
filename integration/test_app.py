"""zksched.Cluster in a process, against a real ZooKeeper: registering (who wins a conflict),
what history says of a function's failure and of a timeout, a graceful stop handing over at
once, and apps beside `zksched run` daemons in one cluster."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from integration.fires import FireLog, recording_job
from integration.harness import DaemonProcess, run_cli, wait_until
from zksched import Cluster, Fire, JobConflictError


@pytest.fixture
def apps(zk: str, client_id: str) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(**options: object) -> Cluster:
        options.setdefault("session_timeout", 4.0)
        cluster = Cluster(zk, client_id, **options)  # type: ignore[arg-type]
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


def history(zk: str, client_id: str, job: str) -> list[dict[str, object]]:
    done = run_cli(zk, client_id, "jobs", "history", job, "--json", "--limit", "50")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, object]] = json.loads(done.stdout)
    return rows


def test_the_table_wins_a_conflict_unless_the_app_replaces_it(
    apps: Callable[..., Cluster], zk: str, client_id: str
) -> None:
    first = apps(member_id="first")
    first.add_job(lambda fire: None, "0 2 * * *", name="invoice")
    first.start()
    second = apps(member_id="second")
    second.add_job(lambda fire: None, "0 3 * * *", name="invoice")
    with pytest.raises(JobConflictError) as caught:
        second.start()
    assert "invoice" in str(caught.value) and "schedule" in str(caught.value)
    assert not second.running
    shown = run_cli(zk, client_id, "jobs", "show", "invoice", "--json")
    assert json.loads(shown.stdout)["schedule"] == "0 2 * * *"  # nothing changed
    assert first.is_owner("invoice")

    deploy = apps(member_id="deploy", replace=True)
    deploy.add_job(lambda fire: None, "0 3 * * *", name="invoice")
    deploy.start()
    shown = run_cli(zk, client_id, "jobs", "show", "invoice", "--json")
    assert json.loads(shown.stdout)["schedule"] == "0 3 * * *"
    # the old definition's member is no longer given the job
    wait_until(lambda: deploy.is_owner("invoice") and not first.is_owner("invoice"), 20)


def test_failures_and_timeouts_are_in_history_with_why(
    apps: Callable[..., Cluster], zk: str, client_id: str
) -> None:
    app = apps()

    @app.cron("* * * * * *")
    def broken(fire: Fire) -> None:
        raise ValueError(f"no invoice for {fire.key}")

    @app.cron("* * * * * *", timeout="300ms")
    def stubborn(fire: Fire) -> None:
        fire.cancelled.wait(5)

    app.start()
    wait_until(lambda: len(history(zk, client_id, "broken")) >= 2, 30)
    wait_until(lambda: len(history(zk, client_id, "stubborn")) >= 2, 30)
    failed = history(zk, client_id, "broken")[-1]
    assert failed["state"] == "failed"
    assert f"raised ValueError: no invoice for {failed['fire_key']}" in str(failed["error"])
    timed_out = next(r for r in history(zk, client_id, "stubborn") if r["state"] != "running")
    assert timed_out["state"] == "timeout"
    assert "timed out after 0.3s" in str(timed_out["error"])
    assert "fire.cancelled" in str(timed_out["error"])


def test_stop_hands_the_jobs_over_at_once(
    apps: Callable[..., Cluster], zk: str, client_id: str
) -> None:
    runs: list[tuple[str, float]] = []
    members = [apps(member_id=f"m{i}", session_timeout=20.0) for i in range(2)]
    for member in members:
        member.add_job(
            lambda fire: runs.append((fire.member_id, time.time())),
            "* * * * * *",
            name="tick",
            overlap="allow",
        )
        member.start()
    wait_until(lambda: len(runs) >= 2, 20)
    owner = next(m for m in members if m.is_owner("tick"))
    other = next(m for m in members if m is not owner)
    stopped = time.time()
    owner.stop()
    wait_until(
        lambda: any(m == other.member_id and t > stopped for m, t in runs),
        5,
        what="the other member ran the job well before a 20 s session could expire",
    )
    keys = [m for m, _ in runs]
    assert keys  # every run was recorded


def test_apps_and_daemons_share_a_cluster_each_running_its_own_kind(
    apps: Callable[..., Cluster],
    daemons: Callable[..., DaemonProcess],
    zk: str,
    client_id: str,
    tmp_path: Path,
) -> None:
    log = FireLog(tmp_path / "commands.log")
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(recording_job("cmd", log.path, overlap="allow"))
    daemon = daemons(extra_args=["--member-id", "daemon"])
    wait_until(lambda: daemon.last_members(), 30, what="the daemon joined")
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    calls: list[str] = []
    lock = threading.Lock()

    def record(fire: Fire) -> None:
        with lock:
            calls.append(fire.member_id)

    app = apps(member_id="app")
    app.add_job(record, "* * * * * *", name="fn", overlap="allow")
    app.start()
    wait_until(lambda: len(calls) >= 3 and len(log.fire_keys()) >= 3, 30)
    assert set(calls) == {"app"}
    assert set(log.members_of("cmd")) == {"daemon"}
    # `jobs apply --prune` of a file without the function job leaves it
    done = run_cli(zk, client_id, "jobs", "apply", "--prune", str(jobfile))
    assert done.returncode == 0 and "kept      fn (a function job" in done.stdout
    # a job file naming the function job would take it from the apps: refused
    clash = tmp_path / "clash.toml"
    clash.write_text('[jobs.fn]\nschedule = "@hourly"\ncommand = ["/bin/true"]\n')
    refused = run_cli(zk, client_id, "jobs", "apply", str(clash))
    assert refused.returncode == 2 and "a function job of that name" in refused.stderr
    # the daemon's stop leaves the command job without an owner, never to the app
    daemon.terminate()
    listed = run_cli(zk, client_id, "jobs", "list", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["cmd"]["owner"] is None and rows["fn"]["owner"] == "app"
    assert rows["fn"]["kind"] == "function"


def test_an_app_serves_metrics_probes_and_the_status_page(
    apps: Callable[..., Cluster], zk: str, client_id: str
) -> None:
    import urllib.error
    import urllib.request

    calls: list[str] = []
    app = apps(member_id="served", http="127.0.0.1:0")
    app.add_job(lambda fire: calls.append(fire.key), "* * * * * *", name="shown", overlap="allow")
    app.start()
    wait_until(lambda: len(calls) >= 2, 20)
    http = app._require_daemon().http
    assert http is not None

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(http.url + path, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    # the probe answers from a verdict the app publishes 4 times a second; on a loaded host
    # the one it holds may still be from before the app joined (or stale: 503 too)
    wait_until(lambda: get("/readyz")[0] == 200, 10, what="/readyz to say ready")
    wait_until(lambda: 'job="shown"' in get("/metrics")[1], 20, what="the job in /metrics")
    status, page = get("/")
    assert status == 200 and "shown" in page


def test_a_session_loss_tells_the_running_function_to_stop_and_history_says_so(
    apps: Callable[..., Cluster], proxy_to: Callable[..., object], zk: str, client_id: str
) -> None:
    """Python threads cannot be killed: when the member's session may be gone, the run's
    `fire.cancelled` is set; the run ends when the function returns, recorded `terminated`."""
    from tools.faultproxy import BLACKHOLE, PASS, FaultProxy

    proxy = proxy_to()
    assert isinstance(proxy, FaultProxy)
    started, told = threading.Event(), threading.Event()
    keys: list[str] = []

    def long_report(fire: Fire) -> None:
        keys.append(fire.key)
        started.set()
        if fire.cancelled.wait(60):
            told.set()

    app = Cluster(proxy.address, client_id, member_id="cut-off", session_timeout=3.0)
    app.add_job(long_report, "* * * * * *", name="long_report")
    try:
        app.start()
        assert started.wait(20), "the function never started"
        proxy.set_mode(BLACKHOLE)  # no word from ZooKeeper: the session may be gone
        assert told.wait(15), "fire.cancelled was never set"
        proxy.set_mode(PASS)

        def recorded() -> dict[str, object] | None:
            rows = history(zk, client_id, "long_report")
            return next(
                (r for r in rows if r["fire_key"] == keys[0] and r["state"] != "running"), None
            )

        row = wait_until(recorded, 30, what="the cut-off run's record")
    finally:
        proxy.set_mode(PASS)
        app.stop()
    assert row["state"] == "terminated", row
    assert "fire.cancelled" in str(row["error"]), row


def test_registering_without_zookeeper_or_with_a_lost_reply_says_so_and_start_again_works(
    zk: str, client_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kazoo.exceptions import ConnectionLoss

    from tools.zkserver import free_port
    from zksched import ClusterUnavailable
    from zksched.zk.jobstore import JobStore

    nowhere = Cluster(f"127.0.0.1:{free_port()}", client_id, session_timeout=4)
    nowhere.add_job(lambda fire: None, "@hourly", name="tidy")
    with pytest.raises(ClusterUnavailable, match=r"cannot reach ZooKeeper at 127\.0\.0\.1:"):
        nowhere.start(timeout=2)
    assert not nowhere.running

    commit = JobStore.commit
    lost: list[bool] = []

    def commit_then_lose_the_reply(self: JobStore, *args: object) -> object:
        result = commit(self, *args)  # type: ignore[arg-type]
        if not lost:
            lost.append(True)
            raise ConnectionLoss()
        return result

    monkeypatch.setattr(JobStore, "commit", commit_then_lose_the_reply)
    app = Cluster(zk, client_id, member_id="again", session_timeout=4)
    app.add_job(lambda fire: None, "@hourly", name="tidy")
    with pytest.raises(ClusterUnavailable, match="may or may not be in it yet: start again"):
        app.start(timeout=10)
    again = Cluster(zk, client_id, member_id="again", session_timeout=4)
    again.add_job(lambda fire: None, "@hourly", name="tidy")
    try:
        again.start(timeout=20)  # the first commit landed: the table is equal, nothing to do
        assert again.running and again.jobs["tidy"].schedule == "@hourly"
    finally:
        again.stop()


def test_a_broken_job_table_is_not_replaced_by_an_app_and_says_how_to_repair_it(
    zk: str, client_id: str, kazoo: KazooClient
) -> None:
    """An app registers its function jobs; a table root it cannot read is an operator's to
    replace (`jobs apply`), and the app says so instead of raising an internal error."""
    from zksched import ClusterUnavailable
    from zksched.zk.paths import ClusterPaths

    paths = ClusterPaths(client_id)
    deep = b"[" * 100_000 + b"]" * 100_000
    kazoo.create(paths.jobs, deep, makepath=True)
    app = Cluster(zk, client_id, member_id="reg", session_timeout=4)
    app.add_job(lambda fire: None, "@hourly", name="tidy")
    with pytest.raises(ClusterUnavailable, match="`zksched jobs apply FILE` with a file"):
        app.start(timeout=10)
    assert not app.running and kazoo.get(paths.jobs)[0] == deep


def test_an_unreadable_bucket_stops_a_start_only_when_it_must_write(
    zk: str, client_id: str, kazoo: KazooClient
) -> None:
    """A start with nothing to write (its jobs there already, or none) never needed the
    whole table; one that must write refuses rather than drop the bucket's jobs."""
    from zksched import ClusterUnavailable
    from zksched.core.jobtable import StoredJob
    from zksched.zk.jobstore import JobStore
    from zksched.zk.paths import ClusterPaths

    first = Cluster(zk, client_id, member_id="reg-1", session_timeout=4)
    first.add_job(lambda fire: None, "@hourly", name="tidy")
    first.start(timeout=10)
    first.stop()
    paths = ClusterPaths(client_id)
    store = JobStore(kazoo, paths, 5.0)
    base, current = store.read_table()
    record = {"format": 1, "name": "", "schedule": "@hourly", "command": ["/bin/true"]}
    names = [f"other-{i}" for i in range(40)]
    others = {n: StoredJob(n, {**record, "name": n}, "") for n in names}
    store.commit(base, {**current, **others})  # more buckets; break one without `tidy`
    broken = next(
        b
        for b in store.read_root().buckets
        if b and "tidy" not in json.loads(kazoo.get(paths.blob(b))[0])["jobs"]
    )
    kazoo.set(paths.blob(broken), b"not json")

    again = Cluster(zk, client_id, member_id="reg-2", session_timeout=4)
    again.add_job(lambda fire: None, "@hourly", name="tidy")
    coordination_only = Cluster(zk, client_id, member_id="reg-3", session_timeout=4)
    try:
        again.start(timeout=10)  # unchanged, in a readable bucket: nothing to write
        coordination_only.start(timeout=10)
    finally:
        again.stop()
        coordination_only.stop()
    newcomer = Cluster(zk, client_id, member_id="reg-4", session_timeout=4)
    newcomer.add_job(lambda fire: None, "@daily", name="report")
    with pytest.raises(ClusterUnavailable, match=f"job bucket {broken} is unreadable"):
        newcomer.start(timeout=10)


def test_a_function_job_changed_in_the_table_is_said_once(
    zk: str, client_id: str, kazoo: KazooClient, caplog: pytest.LogCaptureFixture
) -> None:
    """An app runs only its own definition of a function job: one changed in the table by
    someone else then ran nowhere, and nothing said why."""
    from zksched.core.jobtable import StoredJob
    from zksched.zk.jobstore import JobStore
    from zksched.zk.paths import ClusterPaths

    app = Cluster(zk, client_id, member_id="own", session_timeout=4)
    app.add_job(lambda fire: None, "@hourly", name="tidy")
    app.start(timeout=10)
    try:
        store = JobStore(kazoo, ClusterPaths(client_id), 5.0)
        base, table = store.read_table()
        changed = {**table["tidy"].record, "schedule": "@daily"}
        store.commit(base, {**table, "tidy": StoredJob("tidy", changed, "")})

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if "function job tidy" in r.getMessage()]

        wait_until(lambda: said(), 10, what="the app says the job is not its own")
        assert said() == [
            "function job tidy in the job table is another definition than this app's "
            "(changed since): this app does not run it; start the app with replace=True to "
            "put its own back"
        ]
    finally:
        app.stop()
