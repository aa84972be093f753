"""The daemon's HTTP endpoint against a real ZooKeeper: metrics move as fires and skips
happen (scraped over HTTP), /readyz follows the ZooKeeper session, /healthz the loops."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from integration.fires import FireLog, recording_job
from integration.harness import SESSION_TIMEOUT, DaemonProcess, run_cli, wait_until
from zksched.devtools.faultproxy import BLACKHOLE, PASS, FaultProxy

Start = Callable[..., DaemonProcess]


def start_with_http(daemons: Start, **kwargs: object) -> tuple[DaemonProcess, str]:
    """A daemon listening on a free loopback port; its URL from its own `http` log event."""
    daemon = daemons(extra_args=["--http", "127.0.0.1:0"], **kwargs)
    event = wait_until(lambda: daemon.events("http"), 15, what="HTTP endpoint up")
    return daemon, str(event[0]["url"])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(base: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = get(base + "/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric(base: str, name: str, **labels: str) -> float:
    return scrape(base).get((name, frozenset(labels.items())), 0.0)


def apply(zk: str, client_id: str, path: Path, text: str) -> None:
    path.write_text(text)
    result = run_cli(zk, client_id, "jobs", "apply", str(path))
    assert result.returncode == 0, result.stderr


def test_metrics_count_fires_and_skips(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    daemon, base = start_with_http(daemons)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    assert metric(base, "zksched_members") == 1
    assert metric(base, "zksched_session_connected") == 1

    out = tmp_path / "fires.txt"
    apply(zk, client_id, tmp_path / "jobs.toml", recording_job("tick", out))
    ok = ("zksched_fires_total", {"job": "tick", "outcome": "ok"})
    wait_until(lambda: metric(base, ok[0], **ok[1]) >= 2, 20, what="two fires counted")
    assert metric(base, "zksched_owned_jobs") == 1
    # Every counted fire ran: the counter never runs ahead of what the commands wrote.
    assert metric(base, ok[0], **ok[1]) <= len(FireLog(out).fire_keys())
    assert metric(base, "zksched_fire_delay_seconds_count") >= 2
    assert metric(base, "zksched_run_duration_seconds_count") >= 2

    result = run_cli(zk, client_id, "jobs", "pause", "tick")
    assert result.returncode == 0, result.stderr
    paused = ("zksched_skips_total", {"reason": "paused"})
    wait_until(lambda: metric(base, paused[0], **paused[1]) >= 2, 20, what="paused skips counted")
    assert metric(base, "zksched_job_skips_total", job="tick", reason="paused") >= 2
    assert daemon.alive


def test_readyz_follows_the_session_and_healthz_the_loops(
    daemons: Start, proxy_to: Callable[..., FaultProxy]
) -> None:
    proxy = proxy_to()
    daemon, base = start_with_http(daemons, zk_hosts=proxy.address)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready")
    assert get(base + "/healthz") == (200, "ok\n")

    proxy.set_mode(BLACKHOLE)
    # kazoo notices a silent socket within about two thirds of the session timeout.
    wait_until(lambda: get(base + "/readyz")[0] == 503, SESSION_TIMEOUT + 5, what="not ready")
    status, body = get(base + "/readyz")
    assert status == 503 and "not connected to ZooKeeper" in body
    assert metric(base, "zksched_session_connected") == 0
    # Cut off from ZooKeeper is not unhealthy: the loops still run, and a restart would not
    # help (a liveness probe must not kill every member during a ZooKeeper outage).
    assert get(base + "/healthz")[0] == 200

    proxy.set_mode(PASS)
    wait_until(lambda: get(base + "/readyz")[0] == 200, 20, what="ready again")
    assert metric(base, "zksched_session_connected") == 1
    assert daemon.alive


def test_a_port_in_use_is_refused_before_joining(daemons: Start, zk: str, client_id: str) -> None:
    _, base = start_with_http(daemons)
    address = base.removeprefix("http://")
    result = run_cli(zk, client_id, "run", "--http", address, timeout=20)
    assert result.returncode == 2
    expected = f"zksched: --http {address}: cannot listen: Address already in use"
    assert result.stderr.strip() == expected
    members = run_cli(zk, client_id, "members", "--json")
    assert members.stdout.count('"member_id"') == 1  # only the first daemon ever joined
