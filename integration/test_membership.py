"""Daemons form a cluster: join, leave, crash, partition, late ZooKeeper, ensemble loss."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient

from integration.fires import FireLog, recording_job
from integration.harness import HOSTNAME, SESSION_TIMEOUT, DaemonProcess, run_cli, wait_until
from tools.faultproxy import BLACKHOLE, PASS, FaultProxy
from tools.zkserver import ZkEnsemble, ZkServer
from zksched.zk.paths import ClusterPaths

Start = Callable[..., DaemonProcess]


def all_agree(daemons: list[DaemonProcess], expected: set[str]) -> bool:
    """Every daemon's latest owner table is built from exactly `expected`."""
    return all(set(d.last_members() or ()) == expected for d in daemons)


def removal_time(daemon: DaemonProcess, gone: str) -> float | None:
    """Log timestamp of the first table without `gone`, after it had been in one."""
    seen = False
    for event in daemon.events("members"):
        if gone in event["members"]:
            seen = True
        elif seen:
            return float(event["ts"])
    return None


def test_three_daemons_join_and_are_listed(
    daemons: Start, zk: str, client_id: str, kazoo: KazooClient
) -> None:
    group = [daemons(labels={"role": "db"} if i == 0 else {}) for i in range(3)]
    ids = {d.member_id for d in group}
    wait_until(lambda: all_agree(group, ids), 20, what="three members in every table")

    result = run_cli(zk, client_id, "members", "--json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert {m["member_id"] for m in listed} == ids
    for record in listed:
        assert re.fullmatch(rf"{re.escape(HOSTNAME)}-\d+", record["member_id"])
        assert record["host"] == HOSTNAME and record["pid"] > 0
        assert set(record) >= {"member_id", "host", "pid", "labels", "started_at", "znode"}
    by_id = {m["member_id"]: m for m in listed}
    assert by_id[group[0].member_id]["labels"] == {"role": "db"}

    # Ephemeral and sequential, one node per member.
    paths = ClusterPaths(client_id)
    children = kazoo.get_children(paths.members)
    assert len(children) == 3
    sequences = sorted(int(c.rsplit(".", 1)[1]) for c in children)
    assert len(set(sequences)) == 3
    for child in children:
        assert re.fullmatch(r".+\.\d{10}", child)
        _, stat = kazoo.get(paths.member(child))
        assert stat.ephemeralOwner != 0

    text = run_cli(zk, client_id, "members")
    assert text.returncode == 0 and all(i in text.stdout for i in ids)


def test_sigterm_leaves_every_table_within_a_second(daemons: Start) -> None:
    group = [daemons() for _ in range(3)]
    wait_until(lambda: all_agree(group, {d.member_id for d in group}), 20, what="cluster formed")
    leaver, survivors = group[0], group[1:]
    sent = leaver.terminate()
    assert leaver.process is not None and leaver.process.returncode == 0
    expected = {d.member_id for d in survivors}
    wait_until(lambda: all_agree(survivors, expected), 5, what="leaver gone from every table")
    for survivor in survivors:
        removed = removal_time(survivor, leaver.member_id)
        assert removed is not None
        assert removed - sent < 1.0, f"handover took {removed - sent:.2f}s"


def test_sigkill_leaves_every_table_within_session_timeout(daemons: Start) -> None:
    group = [daemons() for _ in range(3)]
    wait_until(lambda: all_agree(group, {d.member_id for d in group}), 20, what="cluster formed")
    victim, survivors = group[0], group[1:]
    sent = victim.kill()
    expected = {d.member_id for d in survivors}
    wait_until(lambda: all_agree(survivors, expected), SESSION_TIMEOUT + 5, what="victim gone")
    for survivor in survivors:
        removed = removal_time(survivor, victim.member_id)
        assert removed is not None
        assert removed - sent <= SESSION_TIMEOUT + 1.0, f"took {removed - sent:.2f}s"


def test_partitioned_member_rejoins_by_itself(
    daemons: Start, proxy_to: Callable[..., FaultProxy], zk: str
) -> None:
    proxy = proxy_to()
    cut = daemons(zk_hosts=proxy.address)
    others = [daemons() for _ in range(2)]
    everyone = [cut, *others]
    ids = {d.member_id for d in everyone}
    wait_until(lambda: all_agree(everyone, ids), 20, what="cluster formed")
    first_znode = cut.events("members")[-1]["znode"]

    proxy.set_mode(BLACKHOLE)
    rest = {d.member_id for d in others}
    wait_until(lambda: all_agree(others, rest), SESSION_TIMEOUT + 5, what="cut member dropped")
    # The cut-off member declares its session lost on its own, well before it could hear so.
    wait_until(lambda: cut.events("session-lost"), SESSION_TIMEOUT + 2, what="session-lost")
    time.sleep(1.0)
    proxy.set_mode(PASS)
    wait_until(lambda: all_agree(everyone, ids), 20, what="cut member rejoined")
    assert cut.events("members")[-1]["znode"] != first_znode  # a new node on a new session
    assert cut.alive


def test_daemon_started_before_zookeeper_joins_when_it_comes_up(
    daemons: Start, zk_server: ZkServer
) -> None:
    daemon = daemons(zk_hosts=zk_server.connect_string)
    time.sleep(2.5)
    assert daemon.alive and daemon.last_members() is None
    zk_server.start()
    zk_server.wait_serving(30)
    wait_until(lambda: daemon.last_members() == [daemon.member_id], 20, what="late join")
    assert daemon.alive


def test_cluster_survives_losing_one_ensemble_server(daemons: Start, ensemble: ZkEnsemble) -> None:
    group = [daemons(zk_hosts=ensemble.connect_string) for _ in range(3)]
    ids = {d.member_id for d in group}
    wait_until(lambda: all_agree(group, ids), 30, what="cluster formed on the ensemble")

    leader = ensemble.leader()
    assert leader is not None
    leader.stop(kill=True)
    wait_until(lambda: ensemble.leader() is not None, 60, what="a new leader")

    newcomer = daemons(zk_hosts=ensemble.connect_string)
    group.append(newcomer)
    ids.add(newcomer.member_id)
    wait_until(lambda: all_agree(group, ids), 30, what="newcomer seen after the leader died")
    leaver = group.pop(0)
    leaver.terminate()
    ids.discard(leaver.member_id)
    wait_until(lambda: all_agree(group, ids), 10, what="leaver gone after the leader died")
    assert all(d.alive for d in group)


def test_every_member_holds_the_same_table_after_every_change(daemons: Start) -> None:
    group = [daemons() for _ in range(2)]
    ids = {d.member_id for d in group}
    for step in range(4):
        wait_until(lambda: all_agree(group, ids), 20, what=f"agreement at step {step}")
        digests = {d.events("members")[-1]["digest"] for d in group}
        assert len(digests) == 1
        if step % 2 == 0:
            newcomer = daemons()
            group.append(newcomer)
            ids.add(newcomer.member_id)
        else:
            leaver = group.pop(0)
            leaver.terminate()
            ids.discard(leaver.member_id)


def test_a_starting_daemon_joins_only_once_it_has_weighed_every_job(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    """Its node appears after its job table is read and every owner weighed: the share the
    others hand it when it joins is one it can run at once (no gap, nothing run twice)."""
    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text("\n".join(recording_job(f"tick-{i}", out) for i in range(12)))
    first = daemons()
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    log = FireLog(out)
    log.wait_for(lambda: len(log.fire_keys()) >= 24, 30)
    second = daemons()
    wait_until(
        lambda: all_agree([first, second], {first.member_id, second.member_id}), 30, what="join"
    )
    ready = second.events("ready-to-join")
    assert [e["jobs"] for e in ready] == [12], ready
    joined = next(e for e in second.events("members") if second.member_id in e["members"])
    assert float(ready[0]["ts"]) <= float(joined["ts"])
    seen_before = [e for e in first.events("members") if float(e["ts"]) < float(ready[0]["ts"])]
    assert not any(second.member_id in e["members"] for e in seen_before)
    log.wait_for(lambda: second.member_id in {line[1] for line in log.lines()}, 15)
    time.sleep(2)
    assert not log.duplicates()
    assert second.alive and first.alive
