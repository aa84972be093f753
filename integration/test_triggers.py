"""Trigger nodes of jobs that are not in the job table, against a real server: swept once the
table has been written since they were made (a deleted job's, or a stranger's), never one
that may be for a job added since and not read yet."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from integration.harness import DaemonProcess, run_cli, wait_until
from tools.faultproxy import DROP_REPLIES, PASS, FaultProxy
from zksched.core.jobtable import StoredJob
from zksched.zk.jobstore import JobStore
from zksched.zk.paths import ClusterPaths
from zksched.zk.triggers import Triggers

Start = Callable[..., DaemonProcess]
JOB = '[jobs.{name}]\nschedule = "@hourly"\ncommand = ["/bin/true"]\n'


def test_sweep_deletes_only_strays_made_before_the_table_was_last_written(
    kazoo: KazooClient, client_id: str
) -> None:
    paths = ClusterPaths(client_id)
    store = JobStore(kazoo, paths, 5.0)
    record = {"format": 1, "schedule": "@hourly", "command": ["/bin/true"]}
    store.update(lambda _table: {"a": StoredJob("a", record, "2026-01-01T00:00:00Z")})
    kazoo.ensure_path(paths.triggers)

    def trigger(job: str) -> str:
        path = kazoo.create(paths.trigger_prefix(job), b"", sequence=True)
        return str(path).rsplit("/", 1)[1]

    gone, own = trigger("gone"), trigger("a")
    with_child = trigger("gone")
    kazoo.create(f"{paths.triggers}/{with_child}/x", b"")  # a node made to resist a delete
    root = store.update(lambda _table: {})  # the table written since: "a" deleted
    late = trigger("added-since")  # may be for a job this member has not read yet

    triggers = Triggers(kazoo, paths, 5.0)
    children = kazoo.get_children(paths.triggers)
    swept = triggers.sweep(children, {"b"}, root.mzxid)
    assert sorted(swept) == sorted([gone, own, with_child])
    assert kazoo.get_children(paths.triggers) == [late]
    # a job in the table keeps its triggers whenever they were made
    kept = trigger("b")
    assert triggers.sweep(kazoo.get_children(paths.triggers), {"b"}, root.mzxid + 10**6) == [late]
    assert kazoo.get_children(paths.triggers) == [kept]


def test_the_daemon_sweeps_strays_after_a_change_and_keeps_newer_ones(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    """Trigger nodes of jobs that do not exist were never deleted: garbage for ever."""
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(JOB.format(name="real"))
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    daemon = daemons()
    wait_until(lambda: daemon.last_members(), 20, what="joined")
    paths = ClusterPaths(client_id)
    for _ in range(3):
        kazoo.create(paths.trigger_prefix("ghost"), b"", sequence=True, makepath=True)

    jobfile.write_text(JOB.format(name="real") + JOB.format(name="other"))
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    newer = kazoo.create(paths.trigger_prefix("ghost"), b"", sequence=True)
    wait_until(
        lambda: kazoo.get_children(paths.triggers) == [newer.rsplit("/", 1)[1]],
        15,
        what="the three strays swept",
    )
    (event,) = daemon.events("trigger-stray")
    assert event["count"] == 3
    time.sleep(1.5)  # a sweep or two later, the newer one is still there
    assert kazoo.exists(newer) is not None


def test_a_sweep_cut_off_from_zookeeper_deletes_nothing_and_the_next_one_does(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    """Replies lost (ConnectionLoss or the call's deadline): nothing raises out of the job
    table watcher's turn, nothing is counted as deleted; the strays wait for the next sweep."""
    paths = ClusterPaths(client_id)
    kazoo.ensure_path(paths.triggers)
    strays = [
        str(kazoo.create(paths.trigger_prefix("gone"), b"", sequence=True)).rsplit("/", 1)[1]
        for _ in range(2)
    ]
    table_zxid = kazoo.exists(paths.triggers).pzxid + 1  # written after the strays
    proxy = proxy_to()
    client = zk_client(proxy.address, session_timeout=4.0)
    triggers = Triggers(client, paths, 1.0)
    proxy.set_mode(DROP_REPLIES)
    assert triggers.sweep(strays, set(), table_zxid) == []
    proxy.set_mode(PASS)
    wait_until(lambda: client.state == KazooState.CONNECTED, 10, what="reconnected")
    swept = wait_until(lambda: triggers.sweep(strays, set(), table_zxid), 10, what="swept")
    assert sorted(swept) == sorted(strays)
    assert kazoo.get_children(paths.triggers) == []
