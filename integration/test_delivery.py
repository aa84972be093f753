"""Delivery against a real ZooKeeper: owners SIGKILLed right after their claims.

Two every-second jobs, one `delivery = "at-least-once"`, one at-most-once (the default). A
survivor member stays up; round after round a member that owns both jobs joins, claims one
instant of each and is SIGKILLed at once (`tools/die_after_claim.py`, before any
command starts). At-least-once: every instant runs, each killed claim is run again by the
next owner once the dead member's session is gone (same fire key, a later attempt, a
larger fencing token), and history keeps the abandoned attempt. At-most-once: the killed
claims stay `abandoned` and never run; nothing runs twice.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from kazoo.client import KazooClient

from integration.fires import FireLog, every_second, fire_records
from integration.harness import DaemonProcess, run_cli, wait_until
from zksched.core.firekey import fire_key
from zksched.core.jobspec import JobSpec
from zksched.core.members import Member
from zksched.core.owners import OwnerTable

Start = Callable[..., DaemonProcess]
KILLS = 20
JOBS = ("alo", "amo")


def job(name: str, log: Path, delivery: str) -> str:
    script = f'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_ATTEMPT $ZKSCHED_FENCING_TOKEN" >> {log}'
    return (
        f"[jobs.{name}]\n"
        'schedule = "* * * * * *"\n'
        f"command = ['sh', '-c', '{script}']\n"
        'overlap = "allow"\n'
        'catchup = "all"\n'
        'catchup_window = "10m"\n'
        # every record of the test's span stays (20 by default: a loaded run is longer)
        "history = 1000\n"
        f'delivery = "{delivery}"\n'
    )


def killer_id(round_: int) -> str:
    """A member id that owns both jobs against the survivor (one in four does)."""
    specs = {n: JobSpec(name=n, schedule="* * * * * *", command=("true",)) for n in JOBS}
    for n in itertools.count():
        candidate = f"k{round_}-{n}"
        table = OwnerTable([Member("survivor"), Member(candidate)])
        if all(table.job_owner(name, spec) == candidate for name, spec in specs.items()):
            return candidate
    raise AssertionError("unreachable")


def test_owners_killed_right_after_their_claims_lose_nothing_at_least_once(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    log = FireLog(tmp_path / "runs.log")
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(job("alo", log.path, "at-least-once") + job("amo", log.path, "at-most-once"))
    survivor = daemons(extra_args=["--member-id", "survivor"])
    wait_until(lambda: survivor.last_members(), 30, what="the survivor joined")
    done = run_cli(zk, client_id, "jobs", "apply", str(jobfile))
    assert done.returncode == 0, done.stderr
    log.wait_for(lambda: {"alo", "amo"} <= set(log.by_job()), 20)
    begin = datetime.now(UTC)

    for round_ in range(KILLS):
        member = killer_id(round_)
        killer = daemons(
            extra_args=["--member-id", member],
            entry=("-m", "tools.die_after_claim", ",".join(JOBS), "--"),
            session_timeout=1.5,
        )
        wait_until(lambda k=killer: not k.alive, 60, what=f"{member} killed after its claims")
        # its session expires: the jobs come back to the survivor, which runs the orphan
        wait_until(lambda: survivor.last_members() == ["survivor"], 30, what="the expiry")
    end = datetime.now(UTC)

    # the survivor runs what is left once the killed members' sessions have expired
    instants = every_second(begin, end)
    alo_keys = {fire_key("alo", i) for i in instants}

    def unsettled() -> dict[str, str]:
        found = fire_records(kazoo, client_id, "alo")
        return {
            key: "no record" if r is None else r.state
            for key in alo_keys
            if (r := found.get(key.split("@", 1)[1])) is None or r.state == "running"
        }

    try:
        wait_until(lambda: not unsettled(), 180, interval=0.5, what="every instant settled")
    except AssertionError as timeout:
        left = sorted(unsettled().items())
        raise AssertionError(f"{timeout}: {len(left)} left, e.g. {left[:10]}") from None

    # at-least-once: every instant ran exactly once, each with its own fire key
    counts = log.counts()
    runs = {p[0]: p for p in log.lines()}
    assert {k: counts[k] for k in alo_keys if counts[k] != 1} == {}
    alo = fire_records(kazoo, client_id, "alo")
    again = {
        name: r
        for name, r in alo.items()
        if r.attempts and any(a.get("state") == "abandoned" for a in r.attempts)
    }
    assert len(again) >= KILLS, f"{len(again)} instants run again for {KILLS} kills"
    for name, record in again.items():
        key = fire_key("alo", datetime.fromisoformat(name.replace("Z", "+00:00")))
        assert record.state == "ok", (name, record)
        assert record.attempt is not None and record.attempt >= 2, (name, record)
        _, attempt, token = runs[key]
        assert int(attempt) == record.attempt  # ZKSCHED_ATTEMPT, as recorded
        first = next(a for a in record.attempts or [] if a.get("state") == "abandoned")
        assert first["member_id"].startswith("k")
        assert int(token) == record.fencing_token

    # at-most-once: the killed claims are abandoned, never run; nothing ran twice
    history = run_cli(zk, client_id, "jobs", "history", "amo", "--json", "--limit", "1000")
    assert history.returncode == 0, history.stderr
    abandoned = [r["fire_key"] for r in json.loads(history.stdout) if r["state"] == "abandoned"]
    assert len(abandoned) >= KILLS, f"{len(abandoned)} abandoned for {KILLS} kills"
    assert not [k for k in abandoned if counts[k]], "an abandoned instant ran"
    assert log.duplicates() == {}

    # `audit`: the at-least-once job has no gap and nothing left abandoned
    audit = run_cli(zk, client_id, "audit", "--since", begin.isoformat(), "--json")
    report = {j["name"]: j for j in json.loads(audit.stdout)["jobs"]}
    alo_audit = report["alo"]
    assert alo_audit["gaps"] == alo_audit["abandoned"] == alo_audit["duplicates"] == [], alo_audit
    assert len(report["amo"]["abandoned"]) >= KILLS, report["amo"]
