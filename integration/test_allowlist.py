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
from zksched.core.members import Member
from zksched.core.owners import OwnerTable

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
    lenient = daemons(extra_args=["--member-id", LENIENT, "--allow-command", "/bin/sh"])
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
    jobfile.write_text(recording_job(name, out, program="/bin/sh"))
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
    detail = skips[0]["detail"]
    assert detail == f"'/bin/sh' is not in this member's allowed_commands; {LENIENT} runs it"
    assert not [e for e in strict.events("fire") if e["job"] == name]
    assert jobs_list(zk, client_id)[name]["owner"] == LENIENT

    members = run_cli(zk, client_id, "members", "--json")
    advertised = {m["member_id"]: m["allowed_commands"] for m in json.loads(members.stdout)}
    assert advertised == {STRICT: ["/usr/local/bin/*"], LENIENT: ["/bin/sh"]}

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


def test_the_allow_list_cannot_be_bypassed_through_the_job(
    daemons: Start, zk: str, client_id: str, tmp_path: Path
) -> None:
    """Issue 19: an allowed program run with LD_PRELOAD from the job's env, a PATH the job
    sets, a relative argv[0] resolved against its workdir: no member with an allow-list runs
    them (the owner table leaves it out, and the member checks again at the start), and a
    pattern that is not an absolute path is refused before anything starts."""
    strict = daemons(
        extra_args=[
            "--member-id",
            STRICT,
            "--allow-command",
            "/usr/bin/*",
            "--allow-command",
            "/bin/*",
        ]
    )
    wait_until(lambda: strict.last_members(), 20, what="joined")
    out = tmp_path / "fires.log"
    (tmp_path / "bin").mkdir()
    evil = tmp_path / "bin" / "evil"
    evil.write_text(f"#!/bin/sh\necho ran >> {out}\n")
    evil.chmod(0o755)
    jobs = (
        '[jobs.preload]\nschedule = "* * * * * *"\ncommand = ["/usr/bin/true"]\n'
        'env = { LD_PRELOAD = "/tmp/evil.so" }\n'
        '[jobs.own-path]\nschedule = "* * * * * *"\ncommand = ["/bin/sh", "-c", "evil"]\n'
        f'env = {{ PATH = "{tmp_path}/bin" }}\n'
        '[jobs.bare]\nschedule = "* * * * * *"\ncommand = ["evil"]\n'
        '[jobs.relative]\nschedule = "* * * * * *"\ncommand = ["bin/evil"]\n'
        f'workdir = "{tmp_path}"\n'
        f'[jobs.allowed]\nschedule = "* * * * * *"\n'
        f'command = ["/bin/sh", "-c", "echo ok >> {out}"]\n'
    )
    (tmp_path / "jobs.toml").write_text(jobs)
    done = run_cli(zk, client_id, "jobs", "apply", str(tmp_path / "jobs.toml"))
    assert done.returncode == 0, done.stderr
    wait_until(lambda: out.exists() and "ok" in out.read_text(), 20, what="the allowed job ran")
    time.sleep(2.0)
    assert "ran" not in out.read_text()
    listed = jobs_list(zk, client_id)
    for name, why in (
        ("preload", "the job sets LD_PRELOAD in its env"),
        ("own-path", "the job sets PATH in its env"),
        ("bare", "'evil' is not an absolute path"),
        ("relative", "'bin/evil' is not an absolute path"),
    ):
        assert listed[name]["owner"] is None, listed[name]
        assert listed[name]["owner_note"] == "no member allows this command"
        assert not [e for e in strict.events("fire") if e["job"] == name]
        skips = [e for e in strict.events("skip") if e["job"] == name]  # the real reason
        assert [e["reason"] for e in skips] == ["command-not-allowed"], skips
        assert skips[0]["detail"].startswith(why), skips[0]["detail"]
        assert skips[0]["detail"].endswith("; no member allows it: it does not run")
    assert listed["allowed"]["owner"] == STRICT

    for pattern in ("sh", "bin/*"):
        refused = run_cli(zk, client_id, "run", "--allow-command", pattern)
        assert refused.returncode == 2, refused.stderr
        assert "is not an absolute path" in refused.stderr
    config = tmp_path / "zksched.toml"
    config.write_text('[run]\nallowed_commands = ["/usr/bin/*", "true"]\n')
    checked = run_cli(zk, client_id, "config", "check", str(config))
    assert checked.returncode == 2 and "pattern #2" in checked.stderr + checked.stdout
