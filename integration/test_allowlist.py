"""The command allow-list: a job whose argv[0] a member does not allow moves to one that does,
the refusing member says so (skip `command-not-allowed`), and `jobs list` shows a job that no
live member may run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from integration.fires import FireLog, recording_job
from integration.harness import DaemonProcess, run_cli, wait_until
from zksched.core.owners import Member, OwnerTable

Start = Callable[..., DaemonProcess]
STRICT, LENIENT = "allow-strict", "allow-lenient"


def job_owned_by(member_id: str, others: list[str]) -> str:
    """A job name the rendezvous hash gives to `member_id` when allow-lists are left out."""
    table = OwnerTable(Member(m, znode=f"{m}.0000000001") for m in [member_id, *others])
    for i in range(1000):
        name = f"refused-{i}"
        if table.owner(name) == member_id:
            return name
    raise AssertionError("no job name hashes to the member")


def jobs_list(zk: str, client_id: str) -> dict[str, dict[str, object]]:
    done = run_cli(zk, client_id, "jobs", "list", "--json")
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


def test_a_refused_job_moves_to_a_member_that_allows_it(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    strict = daemons(extra_args=["--member-id", STRICT, "--allow-command", "/usr/local/bin/*"])
    lenient = daemons(extra_args=["--member-id", LENIENT, "--allow-command", "sh"])
    wait_until(
        lambda: all(set(d.last_members() or ()) == {STRICT, LENIENT} for d in (strict, lenient)),
        20,
        what="both members see each other",
    )
    # By the hash alone the job is the strict member's; its command is `sh`, which only the
    # lenient member allows.
    name = job_owned_by(STRICT, [LENIENT])
    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(recording_job(name, out))
    done = run_cli(zk, client_id, "jobs", "apply", str(jobfile))
    assert done.returncode == 0, done.stderr

    log = FireLog(out)
    log.wait_for(lambda: len(log.fire_keys()) >= 3, 20)
    assert set(log.members_of(name)) == {LENIENT}
    skips = wait_until(
        lambda: [
            e
            for e in strict.events("skip")
            if e["job"] == name and e["reason"] == "command-not-allowed"
        ],
        10,
        what="the strict member reports the refusal",
    )
    assert "'sh' is not in this member's allowed_commands" in skips[0]["detail"]
    assert not [e for e in strict.events("fire") if e["job"] == name]
    assert jobs_list(zk, client_id)[name]["owner"] == LENIENT

    members = run_cli(zk, client_id, "members", "--json")
    advertised = {m["member_id"]: m["allowed_commands"] for m in json.loads(members.stdout)}
    assert advertised == {STRICT: ["/usr/local/bin/*"], LENIENT: ["sh"]}

    # With the lenient member gone, no live member may run it: the job waits, visibly.
    lenient.terminate()
    row = wait_until(
        lambda: (r := jobs_list(zk, client_id)[name])["owner"] is None and r,
        10,
        what="the job has no owner",
    )
    assert row["owner_note"] == "no member allows this command"
    table = run_cli(zk, client_id, "jobs", "list")
    assert "- (no member allows this command)" in table.stdout
    fired = len(log.fire_keys())
    # A few more every-second instants: the strict member runs none of them.
    time.sleep(2.5)
    assert not [e for e in strict.events("fire") if e["job"] == name]
    assert len(log.fire_keys()) == fired
