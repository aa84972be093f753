"""Function jobs inside apps, against a real ZooKeeper: 4 processes register the same 20
every-second functions (integration/apps/churn_app.py) while processes are SIGKILLed and
SIGTERMed and started again. From the functions' own writes: no instant runs twice, and
every instant of the window ran or is an abandoned claim of a SIGKILLed member (at most
once: the contract; `catchup = "all"` runs what fell into a failover). An abandoned claim
may have run before the kill: it is never run again."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from integration.fires import FireLog, every_second
from integration.hang import hang_guard
from integration.harness import run_cli, wait_until
from zksched.core.firekey import fire_key

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = 4
JOBS = [f"fn{i:02d}" for i in range(20)]
ROUNDS = 8  # churn rounds: SIGKILL and SIGTERM alternate


class App:
    def __init__(self, zk: str, client_id: str, log: Path, out: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CHURN_SESSION_TIMEOUT": "3"}
        self.out = out.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "integration.apps.churn_app", zk, client_id, str(log)],
            cwd=ROOT,
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )

    def stop(self, sig: int) -> None:
        self.process.send_signal(sig)
        try:
            self.process.wait(hang_guard(20))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"an app did not stop within {hang_guard(20):g} s") from None
        finally:
            self.out.close()


@pytest.mark.slow
def test_four_apps_with_churn_run_every_instant_at_most_once(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    log = FireLog(tmp_path / "runs.log")
    outputs = iter(tmp_path / f"app-{n}.out" for n in range(100))
    apps = [App(zk, client_id, log.path, next(outputs)) for _ in range(PROCESSES)]
    try:
        log.wait_for(lambda: set(JOBS) <= set(log.by_job()), 60)
        begin = datetime.now(UTC)
        for round_ in range(ROUNDS):
            time.sleep(3)
            victim = apps.pop(round_ % len(apps))
            victim.stop(signal.SIGKILL if round_ % 2 == 0 else signal.SIGTERM)
            apps.append(App(zk, client_id, log.path, next(outputs)))
        time.sleep(3)
        end = datetime.now(UTC) - timedelta(seconds=1)
        # SIGKILLed members' sessions expire and catch-up runs what fell into the gaps
        instants = every_second(begin, end)
        wanted = {fire_key(job, i) for job in JOBS for i in instants}

        def settled() -> bool:
            return not (wanted - set(log.fire_keys()) - _abandoned(zk, client_id, begin))

        wait_until(settled, 90, interval=1.0, what="every instant ran or was abandoned")
    finally:
        for app in apps:
            if app.process.poll() is None:
                app.stop(signal.SIGTERM)

    counts = log.counts()
    assert {k: n for k, n in counts.items() if n > 1} == {}, "an instant ran twice"
    # `abandoned`: the member was SIGKILLed between the claim and the result's record. Its
    # function may have run meanwhile (in the killed process: nothing stops it, unlike a
    # command's process group), so an abandoned instant may have run once; never again.
    abandoned = _abandoned(zk, client_id, begin)
    lost = sorted(wanted - set(counts))
    assert set(lost) <= abandoned
    ran_then_abandoned = len(abandoned & set(counts))
    print(
        f"{len(wanted)} instants, {len(wanted) - len(lost)} ran, {len(lost)} lost (abandoned "
        f"before running), {ran_then_abandoned} abandoned after running"
    )
    # at most one SIGKILL's worth of in-flight claims per killed member: the kills are 4 of 8
    by_member = collections.Counter(k.split("@", 1)[0] for k in lost)
    assert len(lost) <= 4 * len(JOBS), (len(lost), by_member)
    # the table and history show function jobs like any other
    listed = run_cli(zk, client_id, "jobs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {j["name"] for j in json.loads(listed.stdout)} >= set(JOBS)


def _abandoned(zk: str, client_id: str, since: datetime) -> set[str]:
    audit = run_cli(zk, client_id, "audit", "--since", since.isoformat(), "--json")
    assert audit.returncode in (0, 1), audit.stderr
    report = json.loads(audit.stdout)
    return {f"{job['name']}@{instant}" for job in report["jobs"] for instant in job["abandoned"]}
