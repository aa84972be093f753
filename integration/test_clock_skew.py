"""Clock-skew detection: each member measures its offset from ZooKeeper's clock and publishes
it; `zksched members` shows it and warns past --max-offset."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from integration.harness import SESSION_TIMEOUT, run_cli, wait_until
from zksched.runtime.daemon import Daemon, DaemonConfig
from zksched.zk.connection import ZkSettings


@pytest.fixture
def skewed_pair(zk: str, client_id: str) -> Iterator[list[Daemon]]:
    members = [
        Daemon(
            DaemonConfig(
                zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
                client_id=client_id,
                member_id=f"clock-{name}",
                clock_offset=offset,
            )
        )
        for name, offset in (("true", 0.0), ("ahead", 3.0))
    ]
    for member in members:
        member.start()
    yield members
    for member in members:
        member.stop()


def test_members_shows_offsets_and_warns_about_a_skewed_member(
    skewed_pair: list[Daemon], zk: str, client_id: str
) -> None:
    wait_until(
        lambda: (
            all(m.clock_probe.last is not None for m in skewed_pair)
            and all(m.view.active for m in skewed_pair)
        ),
        20,
        what="both members measured their clocks",
    )
    result = run_cli(zk, client_id, "members", "--json")
    assert result.returncode == 0, result.stderr
    offsets = {r["member_id"]: r["clock_offset_ms"] for r in json.loads(result.stdout)}
    # The offset is good to half a round trip; a loaded box still stays well inside 1 s.
    assert abs(offsets["clock-true"]) < 1000, offsets
    assert abs(offsets["clock-ahead"] - 3000) < 1000, offsets
    assert "clock-ahead's clock is 3.0s ahead of ZooKeeper's" in result.stderr
    assert "clock-true" not in result.stderr

    text = run_cli(zk, client_id, "members")
    assert text.returncode == 0 and "OFFSET" in text.stdout.splitlines()[0]
    assert "warning: member clock-ahead" in text.stderr
    relaxed = run_cli(zk, client_id, "members", "--max-offset", "5")
    assert relaxed.returncode == 0 and "warning" not in relaxed.stderr


def test_a_stale_or_garbage_clock_node_is_replaced(
    zk: str, client_id: str, kazoo: KazooClient
) -> None:
    daemon = Daemon(
        DaemonConfig(
            zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
            client_id=client_id,
            member_id="clock-late",
            clock_offset=-4.0,
        )
    )
    path = daemon.paths.clock("clock-late")
    # left by another session under the same member id, holding garbage
    kazoo.create(path, b"\xff{not json", ephemeral=True, makepath=True)
    daemon.start()
    try:
        wait_until(lambda: daemon.clock_probe.last is not None, 20, what="measured")
        raw, stat = kazoo.get(path)
        assert stat.ephemeralOwner == daemon.client.client_id[0]
        assert json.loads(raw)["offset_ms"] < -3000
        wait_until(lambda: daemon.view.active, 20, what="joined")
        result = run_cli(zk, client_id, "members")
        assert result.returncode == 0
        assert "clock-late's clock is 4.0s behind ZooKeeper's" in result.stderr
    finally:
        daemon.stop()
