"""What the fire path does when things break mid-run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from integration.fires import FireLog, recording_job
from integration.harness import (
    SESSION_TIMEOUT,
    DaemonProcess,
    member_with_jobs,
    run_cli,
    wait_until,
)
from tools.faultproxy import BLACKHOLE, PASS, FaultProxy
from zksched.core.firekey import format_utc
from zksched.runtime.daemon import Daemon, DaemonConfig
from zksched.zk.connection import ZkSettings

Start = Callable[..., DaemonProcess]


def apply_text(zk: str, client_id: str, tmp_path: Path, text: str) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text(text)
    result = run_cli(zk, client_id, "jobs", "apply", str(path))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("policy", ["terminate", "continue"])
def test_session_loss_mid_run(
    policy: str, zk: str, client_id: str, tmp_path: Path, proxy_to: Callable[..., FaultProxy]
) -> None:
    done = tmp_path / "done"
    apply_text(
        zk,
        client_id,
        tmp_path,
        "[jobs.long]\n"
        'schedule = "0 0 1 1 *"\n'
        f"command = ['sh', '-c', 'sleep 6 && touch {done}']\n",
    )
    proxy = proxy_to()
    daemon = Daemon(
        DaemonConfig(
            zk=ZkSettings(hosts=proxy.address, session_timeout=SESSION_TIMEOUT),
            client_id=client_id,
            member_id="m-1",
            on_session_loss=policy,
        )
    )  # type: ignore[arg-type]
    daemon.start()
    try:
        wait_until(lambda: daemon.engine.owned_jobs() == ["long"], 15, what="owning")
        assert run_cli(zk, client_id, "jobs", "trigger", "long").returncode == 0
        wait_until(lambda: daemon.engine.running_jobs() == ["long"], 10, what="running")
        proxy.set_mode(BLACKHOLE)
        if policy == "terminate":
            wait_until(
                lambda: daemon.engine.running_jobs() == [],
                SESSION_TIMEOUT + 3,
                what="the command terminated",
            )
            assert not done.exists()
        else:
            time.sleep(SESSION_TIMEOUT + 1)
            assert daemon.engine.running_jobs() == ["long"]
        proxy.set_mode(PASS)
        wait_until(lambda: daemon.view.active, 20, what="back")
        if policy == "continue":
            wait_until(done.exists, 10, what="the command finished")
        # the result reaches the record once the session is back
        expected = "terminated" if policy == "terminate" else "ok"
        wait_until(
            lambda: (
                _history(zk, client_id, "long")[:1]
                and _history(zk, client_id, "long")[0]["state"] == expected
            ),
            15,
            what=f"record says {expected}",
        )
    finally:
        daemon.stop()


def _history(zk: str, client_id: str, job: str) -> list[dict[str, object]]:
    result = run_cli(zk, client_id, "jobs", "history", job, "--json")
    return json.loads(result.stdout) if result.returncode == 0 else []


def test_run_of_a_killed_member_is_abandoned_and_never_rerun(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    out = tmp_path / "fires.log"
    # Every 3 seconds, runs for 2: a kill mid-run leaves a claimed, unfinished fire.
    script = f'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID" >> {out}; sleep 2'
    apply_text(
        zk,
        client_id,
        tmp_path,
        "[jobs.slowpoke]\n"
        'schedule = "*/3 * * * * *"\n'
        f"command = ['sh', '-c', '{script}']\n"
        'catchup = "all"\n',
    )
    first = daemons()
    wait_until(lambda: first.last_members(), 20, what="joined")
    log = FireLog(out)
    log.wait_for(lambda: log.fire_keys(), 10)
    time.sleep(0.5)  # mid-run
    killed_key = log.fire_keys()[-1]
    first.kill()
    survivor = daemons()
    wait_until(
        lambda: survivor.last_members() == [survivor.member_id],
        SESSION_TIMEOUT + 10,
        what="the survivor alone",
    )
    time.sleep(4)
    history = {r["fire_key"]: r for r in _history(zk, client_id, "slowpoke")}
    assert history[killed_key]["state"] == "abandoned"
    assert log.duplicates() == {}, "an abandoned fire ran again"
    assert any(m == survivor.member_id for _, m in log.lines()), "the survivor took over"


def test_history_is_pruned_to_its_count_but_never_its_youngest_records(
    zk: str, client_id: str, tmp_path: Path, kazoo: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`history = 1` keeps one record and the records of the last PRUNE_MIN_AGE seconds (a
    minute; 6 s here): a member whose clock is behind, claiming an instant another member
    already ran, must find its record (a plain create, within a second of the instant,
    would bring a pruned one back). Pruning raises the horizon first."""
    from kazoo.client import KazooClient

    from zksched.runtime.fire import pruning
    from zksched.zk.paths import ClusterPaths

    assert isinstance(kazoo, KazooClient)
    monkeypatch.setattr(pruning, "PRUNE_MIN_AGE", 6.0)
    out = tmp_path / "out.log"
    daemon = member_with_jobs(zk, client_id, tmp_path, recording_job("chatty", out, history=1))
    try:
        folder = ClusterPaths(client_id).job_fires("chatty")
        wait_until(
            lambda: kazoo.exists(folder) and kazoo.get(folder)[0], 30, what="a prune (its horizon)"
        )
        for _ in range(8):  # as records come and go
            young = format_utc(datetime.fromtimestamp(time.time() - 5.0, UTC))  # 1 s to spare
            ran = [key.split("@", 1)[1] for key in FireLog(out).fire_keys()]
            kept = kazoo.get_children(folder)
            assert all(instant in kept for instant in ran if instant >= young), (young, kept)
            assert len(kept) <= 1 + 5 + 1 + 7  # + the last 6 s, as the fires came
            time.sleep(0.4)
        assert len(kept) < len(ran), "nothing was pruned"
        # the horizon: every pruned instant is at or before it, so no catch-up takes it for
        # one that never ran (core.catchup.unpruned)
        raw, _ = kazoo.get(folder)
        horizon = json.loads(raw)["pruned_through"]
        assert all(instant <= horizon for instant in ran if instant not in kept)
        assert horizon < young
    finally:
        daemon.stop()


def test_a_claim_whose_outcome_was_unknown_is_settled_and_never_run_twice(
    zk: str, client_id: str, tmp_path: Path, kazoo: object
) -> None:
    """The create lands but its reply is lost, and ZooKeeper stays unreadable for longer
    than the job's period: once ZooKeeper answers, the claim is found to be ours and
    settled. Its successor was due meanwhile (overlap = skip: no backlog), so it is
    recorded skipped, not run late; the job's later instants run as usual."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    from zksched.core.firerecord import FireRecord
    from zksched.zk.paths import ClusterPaths

    assert isinstance(kazoo, KazooClient)
    out = tmp_path / "fires.log"
    apply_text(zk, client_id, tmp_path, recording_job("unlucky", out, schedule="*/2 * * * * *"))
    daemon = Daemon(
        DaemonConfig(
            zk=ZkSettings(hosts=zk, session_timeout=SESSION_TIMEOUT),
            client_id=client_id,
            member_id="m-1",
        )
    )
    claims = daemon.engine.io.claims
    real_claim, real_resolve = claims.claim, claims.resolve
    state = {"victim": None, "blind_until": 0.0}

    def claim(record):  # type: ignore[no-untyped-def]
        outcome = real_claim(record)
        # A scheduled fire: under load the first instant can reach its claim as a catch-up
        # (its lease came late), and a catch-up settled late is `outside-catchup-window`.
        if state["victim"] is None and record.kind == "scheduled":
            state["victim"] = record.fire_key
            state["blind_until"] = time.monotonic() + SESSION_TIMEOUT  # past the deadline
            raise KazooTimeoutError("injected: the reply was lost")
        return outcome

    def resolve(record):  # type: ignore[no-untyped-def]
        if time.monotonic() < state["blind_until"]:
            raise KazooTimeoutError("injected: ZooKeeper does not answer yet")
        return real_resolve(record)

    claims.claim, claims.resolve = claim, resolve  # type: ignore[method-assign]
    daemon.start()
    try:
        wait_until(lambda: state["victim"], 15, what="the injected failure")
        victim = str(state["victim"])
        path = ClusterPaths(client_id).fire("unlucky", victim.split("@", 1)[1])

        def settled() -> bool:
            return FireRecord.from_json(kazoo.get(path)[0]).state != "running"

        wait_until(settled, 15, what="the claim to be settled")
        record = FireRecord.from_json(kazoo.get(path)[0])
        assert (record.state, record.skip_reason) == ("skipped", "still-running")
        log = FireLog(out)
        wait_until(lambda: len(log.fire_keys()) >= 2, 15, what="later instants to run")
        assert victim not in log.fire_keys()
        assert log.duplicates() == {}
    finally:
        daemon.stop()
