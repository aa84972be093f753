"""Digest auth: every znode zksched creates (the chroot and folders made on the way included)
is writable by zksched's credential only and readable by anyone. Proven against a real server
by an unauthenticated client that tries to change, create under, delete and re-ACL every node
of a live cluster: members, the job table (root and blobs), fire records, locks, triggers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from integration.fires import FireLog, recording_job
from integration.harness import DaemonProcess, run_cli, wait_until

Start = Callable[..., DaemonProcess]
CREDENTIAL = "zksched:s3cret-Acl"
SECRET_ENV_VALUE = "env-value-that-must-never-be-logged-5f2a"


def walk(client: KazooClient, path: str) -> Iterator[str]:
    yield path
    try:
        children = client.get_children(path)
    except NoNodeError:
        return
    for child in sorted(children):
        yield from walk(client, f"{path.rstrip('/')}/{child}")


def kind_of(path: str, base: str) -> str:
    rest = path[len(base) :].strip("/").split("/")
    if rest == [""]:
        return "cluster"
    if rest[0] == "jobs":
        return "jobs-root" if len(rest) == 1 else "blobs"
    return rest[0]


def refuses_strangers(stranger: KazooClient, path: str, chroot: str) -> None:
    """`path` is readable by anyone and writable by zksched's credential only (NoNodeError
    when it vanishes meanwhile)."""
    acl, _ = stranger.get_acls(path)
    world = [a for a in acl if a.id.scheme == "world"]
    digest = [a for a in acl if a.id.scheme == "digest"]
    assert [a.perms for a in world] == [Permissions.READ], (path, acl)
    assert [a.perms for a in digest] == [Permissions.ALL], (path, acl)
    assert digest[0].id.id.startswith("zksched:"), (path, acl)
    stranger.get(path)  # anyone may read
    with pytest.raises(NoAuthError):
        stranger.set(path, b"tampered")
    with pytest.raises(NoAuthError):
        stranger.create(f"{path}/intruder", b"x")
    with pytest.raises(NoAuthError):
        stranger.set_acls(path, OPEN_ACL_UNSAFE)
    if path != chroot:  # the chroot's parent is the server's open root
        with pytest.raises(NoAuthError):
            stranger.delete(path)


@pytest.fixture
def stranger(zk: str) -> Iterator[KazooClient]:
    """A client with no credential at all."""
    client = KazooClient(hosts=zk)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def test_unauthenticated_clients_can_read_but_change_nothing(
    daemons: Start,
    zk: str,
    client_id: str,
    tmp_path: Path,
    stranger: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chroot = f"/acl-{client_id}"
    hosts = zk + chroot
    monkeypatch.setenv("ZKSCHED_AUTH", CREDENTIAL)  # the daemon and the CLI below
    config = tmp_path / "zksched.toml"
    config.write_text('log_level = "debug"\n')  # nothing secret at any level
    monkeypatch.setenv("ZKSCHED_CONFIG", str(config))
    daemon = daemons(zk_hosts=hosts)
    wait_until(lambda: daemon.last_members(), 20, what="the member joined")

    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        recording_job("recorded", out)
        + '\n[jobs.slow]\nschedule = "* * * * * *"\ncommand = ["sleep", "3"]\n'
        + f'env = {{ API_TOKEN = "{SECRET_ENV_VALUE}" }}\n'
        + '\n[jobs.manual]\nschedule = "0 0 1 1 *"\ncommand = ["true"]\n'
    )
    done = run_cli(hosts, client_id, "jobs", "apply", str(jobfile))
    assert done.returncode == 0, done.stderr
    log = FireLog(out)
    log.wait_for(lambda: len(log.fire_keys()) >= 2, 20)
    done = run_cli(hosts, client_id, "jobs", "trigger", "manual")
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: [e for e in daemon.events("fire") if e["job"] == "manual"], 20, what="trigger ran"
    )
    base = f"{chroot}/zksched/{client_id}"
    # `slow` runs 3 s every second with overlap = skip: its lock is held most of the time.
    wait_until(
        lambda: any(
            "/locks/" in p and "lock" in p.rsplit("/", 1)[-1] for p in walk(stranger, base)
        ),
        10,
        what="a held lock",
    )

    nodes = list(walk(stranger, chroot))
    kinds = {kind_of(p, base) for p in nodes if p.startswith(base)}
    assert {"cluster", "members", "jobs-root", "blobs", "fires", "locks", "triggers"} <= kinds
    assert len(nodes) > 20

    checked: set[str] = set()
    for path in nodes:
        try:
            refuses_strangers(stranger, path, chroot)
        except NoNodeError:
            continue  # gone since the walk: a lock given back, a record pruned
        checked.add(kind_of(path, base) if path.startswith(base) else "chroot")

    assert {"cluster", "members", "jobs-root", "blobs", "fires", "locks", "triggers"} <= checked

    # The daemon kept running through all of that, and the job's env value never reached
    # its log (it only goes to the command's environment).
    count = len(log.fire_keys())
    log.wait_for(lambda: len(log.fire_keys()) > count, 10)
    wait_until(
        lambda: [e for e in daemon.events("fire") if e["job"] == "slow"], 10, what="slow ran"
    )
    logged = daemon.log_text()
    assert SECRET_ENV_VALUE not in logged
    assert CREDENTIAL.split(":", 1)[1] not in logged  # the password, at any level
    shown = run_cli(hosts, client_id, "jobs", "show", "slow")
    assert shown.returncode == 0 and SECRET_ENV_VALUE not in shown.stdout


def test_nodes_others_made_before_are_refused_by_name(
    zk: str,
    client_id: str,
    tmp_path: Path,
    stranger: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 19: nodes that existed before, made without the digest ACL (an unauthenticated
    client, a cluster without auth on the same ensemble), were used as they were: whoever
    made them could write the job table an authenticated daemon runs. `jobs apply` and `run`
    now refuse them (exit 2, naming the node and the fix) and change nothing."""
    chroot = f"/acl-pre-{client_id}"
    hosts = zk + chroot
    stranger.create(f"{chroot}/zksched/{client_id}/jobs", b"", acl=OPEN_ACL_UNSAFE, makepath=True)
    monkeypatch.setenv("ZKSCHED_AUTH", CREDENTIAL)
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text('[jobs.x]\nschedule = "@hourly"\ncommand = ["true"]\n')
    for args in (("jobs", "apply", str(jobfile)), ("run", "--http", "")):
        refused = run_cli(hosts, client_id, *args, timeout=60)
        assert refused.returncode == 2, (args, refused.stderr)
        assert f"/zksched/{client_id}/jobs may be changed by world:anyone (cdrwa)" in (
            refused.stderr
        ), refused.stderr
        assert "Traceback" not in refused.stderr
    assert stranger.get(f"{chroot}/zksched/{client_id}/jobs")[0] == b""  # nothing written

    # the fix the message names (the cluster's own folder, made on the way, was open too)
    stranger.delete(f"{chroot}/zksched/{client_id}", recursive=True)
    done = run_cli(hosts, client_id, "jobs", "apply", str(jobfile))
    assert done.returncode == 0, done.stderr


def test_every_command_that_writes_refuses_open_nodes(
    zk: str, client_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster made without auth: with --auth, not only `jobs apply` and `run` but every
    command that writes refuses it (a pause that succeeded read as proof of protection)."""
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text('[jobs.x]\nschedule = "@hourly"\ncommand = ["/bin/true"]\n')
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0  # open

    def table() -> list[tuple[str, bool]]:
        rows = json.loads(run_cli(zk, client_id, "jobs", "list", "--all", "--json").stdout)
        return [(r["name"], r["paused"]) for r in rows]

    assert table() == [("x", False)]
    monkeypatch.setenv("ZKSCHED_AUTH", CREDENTIAL)
    for args in (
        ("jobs", "pause", "x"),
        ("jobs", "resume", "x"),
        ("jobs", "delete", "x"),
        ("jobs", "trigger", "x"),
        ("jobs", "at", "+1h", "once", "--", "/bin/true"),
    ):
        refused = run_cli(zk, client_id, *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert "may be changed by world:anyone" in refused.stderr, refused.stderr
    monkeypatch.delenv("ZKSCHED_AUTH")
    assert table() == [("x", False)]  # nothing changed, no one-off added


def test_an_app_refuses_a_leader_folder_others_made(
    zk: str, client_id: str, stranger: KazooClient
) -> None:
    """An app with `auth` checks the same nodes as `zksched run`, its leader and lock
    folders included: a stranger's world-writable `leader` folder could hold a candidate that
    leads the apps' cluster."""
    from zksched import Cluster

    chroot = f"/acl-app-{client_id}"
    stranger.create(f"{chroot}/zksched/{client_id}/leader", b"", acl=OPEN_ACL_UNSAFE, makepath=True)
    app = Cluster(zk + chroot, client_id, auth=CREDENTIAL, session_timeout=4)
    app.add_job(lambda fire: None, "@hourly", name="tidy")
    with pytest.raises(PermissionError, match=f"/zksched/{client_id}/leader may be changed by"):
        app.start(timeout=20)
    assert not app.running
    assert not stranger.exists(f"{chroot}/zksched/{client_id}/jobs")  # nothing registered
