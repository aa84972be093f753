"""Random bytes and wrong JSON shapes in ZooKeeper while a daemon runs: in job records and
buckets, member znodes, fire records, trigger nodes and clock nodes. The daemon stays alive
and keeps firing the valid job; the reading commands answer without a traceback."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from integration.fires import FireLog, recording_job
from integration.harness import DaemonProcess, run_cli, wait_until
from zksched.core.firekey import parse_utc
from zksched.core.jobtable import StoredJob
from zksched.zk.jobstore import MIN_BUCKETS, JobStore, blob_id, bucket_index
from zksched.zk.paths import ClusterPaths

Start = Callable[..., DaemonProcess]


def json_values(finite: bool = False) -> Any:
    """JSON values; `finite`: without Infinity, which a job store refuses to write (a bucket
    holding one is not JSON, and every job in it would be lost)."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=not finite)
        | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=10,
    )


JSON = json_values()
RECORD_JSON = json_values(finite=True)  # what a writer through the job store can write
# Shapes close to the real ones are the likelier to get past a first check.
FIRE_LIKE = st.fixed_dictionaries(
    {
        "job": JSON,
        "scheduled": JSON,
        "member_id": JSON,
        "session": JSON,
        "nonce": JSON,
        "state": JSON,
        "claimed_at": JSON,
    },
    optional={"extra": JSON, "skip_reason": JSON, "kind": JSON, "fencing_token": JSON},
)
JOB_LIKE = st.fixed_dictionaries(
    {"name": st.just("victim"), "schedule": RECORD_JSON, "command": RECORD_JSON},
    optional={key: RECORD_JSON for key in ("timezone", "labels", "env", "history", "timeout")},
)
MEMBER_LIKE = st.fixed_dictionaries(
    {"member_id": JSON, "host": JSON, "pid": JSON, "labels": JSON, "started_at": JSON}
)
# Values of each class that once got past a first check somewhere (issue 19): nesting past
# the parser's recursion, numbers that do not fit or are not finite, overlong text, control
# characters, ids that are not ids.
HOSTILE = st.sampled_from(
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 30_000 + b"1" + b"}" * 30_000,
        b"9" * 5000,
        b'{"member_id": "m", "pid": 1e400, "session": NaN}',
        rb'{"member_id": "evil\u001b[2J", "host": "\u0007\u001b]0;pwned\u0007"}',
        b'{"member_id": "../../etc", "host": "h", "pid": -1}',
        json.dumps({"member_id": "m", "host": "x" * 100_000}).encode(),
        b"\xff\xfe\x00garbage",
    ]
)
PAYLOAD = st.one_of(
    st.binary(max_size=200),
    JSON.map(lambda v: json.dumps(v).encode()),
    HOSTILE,
)


def as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def no_traceback(result: Any) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1, 2), (result.returncode, result.stderr)
    shown = result.stdout + result.stderr  # nothing a terminal would act on
    assert not any(c in shown for c in "\x1b\x07\x08\r\u202e"), shown[-2000:]


def test_hostile_records_never_stop_the_daemon_or_the_commands(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        recording_job("steady", out)
        + recording_job("sure", out, delivery="at-least-once")
        + '[jobs.victim]\nschedule = "@hourly"\ncommand = ["/bin/true"]\n'
    )
    group = [daemons() for _ in range(3)]
    wait_until(
        lambda: all(len(d.last_members() or ()) == 3 for d in group),
        20,
        what="three members joined",
    )
    # In the valid jobs' folders before they are applied, names a member would once obey:
    # a record from the future (the job's owner skipped every instant up to it), a skip
    # range from the future (late claims, so every at-least-once start, were refused as
    # covered), a name out of a datetime's range (the planning's arithmetic overflowed), a
    # running record named by no instant (an at-least-once job's history read failed for
    # ever). Both jobs fire from the start, and again once the steady one has moved.
    paths = ClusterPaths(client_id)
    ahead = "2099-06-01T00:00:00Z"
    for job, node, state, extra in (
        ("steady", ahead, "ok", {}),
        ("sure", "2999-01-01T00:00:00Z", "skipped", {"covers_from": "2000-01-01T00:00:00Z"}),
        ("steady", "zzz", "running", {}),
        ("sure", "zzz", "running", {}),
    ):
        record = {
            "job": job,
            "scheduled": node,
            "member_id": "m",
            "session": 1,
            "nonce": "n",
            "state": state,
            "claimed_at": node,
            "extra": extra,
            **({"skip_reason": "paused"} if state == "skipped" else {}),
        }
        kazoo.create(paths.fire(job, node), json.dumps(record).encode(), makepath=True)
    for job in ("steady", "sure"):
        kazoo.create(paths.fire(job, "0001-01-01T00:00:00Z"), b"")
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    log = FireLog(out)
    log.wait_for(lambda: {"steady", "sure"} <= set(log.by_job()), 20)
    daemon = next(d for d in group if d.member_id in log.members_of("steady"))
    store = JobStore(kazoo, paths, 5.0)
    counter = iter(range(10**6))

    @settings(
        max_examples=5,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        job_record=st.one_of(JOB_LIKE, RECORD_JSON),
        blob=st.binary(max_size=200),
        member=st.one_of(MEMBER_LIKE.map(as_bytes), PAYLOAD),
        fire=st.one_of(FIRE_LIKE.map(as_bytes), PAYLOAD),
        trigger=PAYLOAD,
    )
    def inject(job_record: Any, blob: bytes, member: bytes, fire: bytes, trigger: bytes) -> None:
        n = next(counter)
        updated_at = "2026-01-01T00:00:00Z" if n % 2 else "\x1b]0;pwned\x07\u202e"
        # a wrong-shaped record for one job (its bucket stays valid JSON: the store writes no
        # Infinity; test_jobstore_layout shows it refuses to)
        root, table = store.read_table()  # as far as it can be read: a writer of garbage
        store.commit(root, {**table, "victim": StoredJob("victim", job_record, updated_at)})
        # a bucket of random bytes named by the root, next to the valid ones
        bad_id = blob_id(blob + str(n).encode())
        root = store.read_root()
        kazoo.create(paths.blob(bad_id), blob)
        root_data = json.loads(kazoo.get(paths.jobs)[0])
        root_data["buckets"] = [*root.buckets, bad_id]
        kazoo.set(paths.jobs, json.dumps(root_data).encode(), version=root.version)
        # member, fire, trigger and clock nodes holding garbage
        kazoo.create(paths.member(f"evil-{n}.{n:010d}"), member, ephemeral=True)
        kazoo.create(
            paths.fire("steady", f"2020-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z"),
            fire,
            makepath=True,
        )
        kazoo.create(paths.fire("victim", f"garbage-{n}"), fire, makepath=True)
        kazoo.create(paths.trigger_prefix("victim"), trigger, sequence=True, makepath=True)
        kazoo.create(paths.triggers + f"/no-such-job-{n}", trigger)
        with contextlib.suppress(NodeExistsError):
            kazoo.create(paths.clock(daemon.member_id) + f"-{n}", member, makepath=True)
        time.sleep(0.2)  # let the watches fire and the daemons read all of it
        assert all(d.alive for d in group)

    inject()
    # Shapes that once reached a reader: a running record with an unhashable session, as the
    # newest record of a job (`jobs list` shows it) and in its history.
    for node, extra in (("2099-01-01T00:00:00Z", {}), ("2099-01-01T00:00:01Z", 5)):
        odd = {
            "job": "victim",
            "scheduled": node,
            "member_id": "m",
            "session": [1],
            "nonce": "n",
            "state": "running",
            "claimed_at": node,
            "extra": extra,
        }
        kazoo.create(paths.fire("victim", node), json.dumps(odd).encode(), makepath=True)

    injected = time.time()
    # the valid jobs go on firing, on time (a busy machine may slow the daemons' reading
    # of the garbage above: a wait, not a fixed window); each job's own starts are waited
    # for (an at-least-once catch-up can write several lines of one job at once)
    try:
        log.wait_for(
            lambda: all(started_after(log, job, injected) >= 2 for job in ("steady", "sure")), 15
        )
    except AssertionError as stalled:
        starts = {job: started_after(log, job, injected) for job in ("steady", "sure")}
        problems = "\n".join(
            line
            for d in group
            for line in d.log_text().splitlines()
            if '"level": "warning"' in line or '"level": "error"' in line
        )
        raise AssertionError(f"starts after the garbage: {starts}\n{problems[-6000:]}") from stalled
    assert daemon.alive, daemon.log_text()[-3000:]
    assert log.duplicates() == {}
    for job in ("steady", "sure"):
        assert max(lateness(log, job, after=injected)) < 3.0

    for args in (
        ("members",),
        ("members", "--json"),
        ("owners",),
        ("jobs", "list"),
        ("jobs", "list", "--json"),
        ("jobs", "history", "steady"),
        ("jobs", "history", "sure"),
        ("jobs", "history", "victim", "--json"),
        ("jobs", "show", "victim"),
        ("audit",),
        ("audit", "--json"),
    ):
        result = run_cli(zk, client_id, *args)
        no_traceback(result)
    listed = json.loads(run_cli(zk, client_id, "jobs", "list", "--json").stdout)
    steady = next(r for r in listed if r["name"] == "steady")
    assert steady["error"] is None and steady["owner"] == daemon.member_id
    assert steady["last_scheduled"] < ahead  # a record from the future is no last result
    report = json.loads(run_cli(zk, client_id, "audit", "--json").stdout)
    assert report["clean"] is False  # garbage records are reported, not ignored
    problems = next(j["problems"] for j in report["jobs"] if j["name"] == "steady")
    assert f"fire record {ahead!r} is from the future: the daemons ignore it" in problems
    assert all(d.alive for d in group)

    # failover still works with all of it in place: the owner stops, the job moves
    daemon.terminate()
    stopped = time.time()
    time.sleep(3)
    later = [
        m
        for k, m, _t, started in log.lines()
        if k.startswith("steady@") and float(started) > stopped + 1
    ]
    assert later and daemon.member_id not in later, later
    for job in ("steady", "sure"):
        assert max(lateness(log, job, after=stopped + 1)) < 3.0


def started_after(log: FireLog, job: str, after: float) -> int:
    lines = log.lines()
    return sum(1 for key, *_, at in lines if key.startswith(f"{job}@") and float(at) > after)


def lateness(log: FireLog, job: str, after: float) -> list[float]:
    """Seconds from each instant of `job` to its start, for starts after `after`."""
    late = [
        float(started) - parse_utc(key.split("@", 1)[1]).timestamp()
        for key, _member, _token, started in log.lines()
        if key.startswith(f"{job}@") and float(started) > after
    ]
    assert late, f"no start of {job} after {after}"
    return late


def test_a_hostile_member_node_is_ignored_and_failover_still_works(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    """Issue 19: a member znode of 100,000 nested arrays made every daemon's membership
    refresh fail forever (nobody took a stopped member's jobs); a persistent node under
    `members/` was taken for a member and given jobs that never ran; ids and hosts with
    control characters reached the terminal raw. Now each is ignored (logged), the
    members that are members keep the table, and a stopped member's jobs move."""
    paths = ClusterPaths(client_id)
    first, second = daemons(), daemons()
    wait_until(
        lambda: all(len(d.last_members() or ()) == 2 for d in (first, second)),
        20,
        what="both members see each other",
    )
    kazoo.create(paths.member("deep.0000009001"), b"[" * 100_000 + b"]" * 100_000, ephemeral=True)
    fake = {"member_id": "ghost", "host": "h", "pid": 1, "labels": {}, "started_at": ""}
    kazoo.create(paths.member("ghost.0000009002"), json.dumps(fake).encode())  # persistent
    loud = {**fake, "member_id": "loud", "host": "\u001b[2J\u0007pwned"}
    kazoo.create(paths.member("loud.0000009003"), json.dumps(loud).encode(), ephemeral=True)

    out = tmp_path / "fires.log"
    jobs = "".join(recording_job(f"job-{i}", out) for i in range(8))
    (tmp_path / "jobs.toml").write_text(jobs)
    assert run_cli(zk, client_id, "jobs", "apply", str(tmp_path / "jobs.toml")).returncode == 0
    log = FireLog(out)
    log.wait_for(lambda: {f"job-{i}" for i in range(8)} <= set(log.by_job()), 20)
    members = json.loads(run_cli(zk, client_id, "members", "--json").stdout)
    assert {m["member_id"] for m in members} == {first.member_id, second.member_id}
    shown = run_cli(zk, client_id, "members")
    assert "\x1b" not in shown.stdout + shown.stderr and "\x07" not in shown.stdout + shown.stderr
    for args in (("status",), ("owners",), ("jobs", "list"), ("audit",)):
        no_traceback(run_cli(zk, client_id, *args))

    first.terminate()  # its jobs move to the member that is left
    moved = time.time()
    wait_until(
        lambda: set(second.last_members() or ()) == {second.member_id}, 10, what="the table shrank"
    )
    time.sleep(2.5)
    ran_after = {
        key.split("@")[0]
        for key, member, _token, started in log.lines()
        if member == second.member_id and float(started) > moved + 1
    }
    assert {f"job-{i}" for i in range(8)} <= ran_after, ran_after
    assert second.alive


def test_jobs_apply_replaces_a_broken_job_table(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    """Issue 19: a job table root the readers cannot use (nested past the parser's
    recursion, bucket ids that are paths) kept `jobs apply` from repairing it. The daemon
    keeps its last good table meanwhile; the reading commands say what is wrong; an apply
    replaces the whole table, and the daemon follows it."""
    out = tmp_path / "fires.log"
    (tmp_path / "jobs.toml").write_text(recording_job("before", out))
    daemon = daemons()
    wait_until(lambda: daemon.last_members(), 20, what="daemon joined")
    assert run_cli(zk, client_id, "jobs", "apply", str(tmp_path / "jobs.toml")).returncode == 0
    log = FireLog(out)
    log.wait_for(lambda: "before" in log.by_job(), 20)
    paths = ClusterPaths(client_id)
    for broken in (
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps({"format": 1, "generation": 9, "buckets": ["../../members"]}).encode(),
        # a well-formed bucket id that names no bucket: reading it again never helped
        json.dumps({"format": 1, "generation": 9, "buckets": ["0" * 24]}).encode(),
    ):
        kazoo.set(paths.jobs, broken)
        listed = run_cli(zk, client_id, "jobs", "list")
        assert listed.returncode == 1 and "job table root" in listed.stderr, listed.stderr
        no_traceback(listed)
        more = len(log.by_job()["before"]) + 2
        log.wait_for(lambda n=more: len(log.by_job()["before"]) >= n, 10)  # last good table
        (tmp_path / "jobs.toml").write_text(recording_job("after", out))
        done = run_cli(zk, client_id, "jobs", "apply", str(tmp_path / "jobs.toml"))
        assert done.returncode == 0, done.stderr
        assert "replacing the whole table" in done.stderr
        log.wait_for(lambda: "after" in log.by_job(), 20)
        listed = json.loads(run_cli(zk, client_id, "jobs", "list", "--json").stdout)
        assert [r["name"] for r in listed] == ["after"]
        (tmp_path / "jobs.toml").write_text(recording_job("before", out))
        assert (
            run_cli(
                zk, client_id, "jobs", "apply", "--prune", str(tmp_path / "jobs.toml")
            ).returncode
            == 0
        )
    assert daemon.alive
    # each broken root logged as such, not re-read in a loop
    assert daemon.log_text().count("could not read the job table") <= 3


def test_a_change_never_drops_the_jobs_of_a_bucket_it_cannot_read(
    zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    """A bucket that cannot be read (here: bytes that are not text) left its jobs out of the
    table read, and the next `jobs pause` of any other job wrote the
    table without them, saying nothing. A change now refuses, naming the bucket; `jobs
    apply` says what it replaces."""
    names = [f"job-{i}" for i in range(12)]
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(
        "".join(f'[jobs.{n}]\nschedule = "@hourly"\ncommand = ["/bin/true"]\n' for n in names)
    )
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    paths = ClusterPaths(client_id)
    store = JobStore(kazoo, paths, 5.0)
    root = store.read_root()
    broken = next(b for b in root.buckets if b)
    lost = set(json.loads(kazoo.get(paths.blob(broken))[0])["jobs"])
    kazoo.set(paths.blob(broken), b'{"format":1,"jobs":{"x":\xff\xfe}}')
    other = next(n for n in names if n not in lost)

    for args in (("jobs", "pause", other), ("jobs", "at", "+1h", "once", "--", "/bin/true")):
        refused = run_cli(zk, client_id, *args)
        assert refused.returncode == 1, (args, refused.stderr)
        assert f"job bucket {broken} is unreadable" in refused.stderr, refused.stderr
        no_traceback(refused)
    assert store.read_root().version == root.version  # nothing written

    listed = run_cli(zk, client_id, "jobs", "list", "--json")  # reading still works
    assert {r["name"] for r in json.loads(listed.stdout)} == set(names) - lost
    done = run_cli(zk, client_id, "jobs", "apply", str(jobfile))
    assert done.returncode == 0, done.stderr
    assert "the jobs of" in done.stderr and f"job bucket {broken}" in done.stderr
    listed = run_cli(zk, client_id, "jobs", "list", "--json")
    assert {r["name"] for r in json.loads(listed.stdout)} == set(names)


def test_a_record_its_bucket_cannot_carry_disables_that_job_only(
    daemons: Start, zk: str, client_id: str, tmp_path: Path, kazoo: KazooClient
) -> None:
    """NaN in one job's record (written by a hand or a tool, past the store's own refusal)
    made its whole bucket unreadable: every job sharing the bucket stopped, cluster-wide.
    Now that job alone is disabled, `jobs list` says why, and `jobs apply` repairs it."""
    keep, spoil = same_bucket_names()
    out = tmp_path / "fires.log"
    jobfile = tmp_path / "jobs.toml"
    jobfile.write_text(recording_job(keep, out) + recording_job(spoil, out))
    group = [daemons() for _ in range(3)]
    wait_until(lambda: all(len(d.last_members() or ()) == 3 for d in group), 20, what="joined")
    assert run_cli(zk, client_id, "jobs", "apply", str(jobfile)).returncode == 0
    log = FireLog(out)
    log.wait_for(lambda: {keep, spoil} <= set(log.by_job()), 20)

    paths = ClusterPaths(client_id)
    root = JobStore(kazoo, paths, 5.0).read_root()
    shared = next(
        b for b in root.buckets if b and spoil in json.loads(kazoo.get(paths.blob(b))[0])["jobs"]
    )
    data = json.loads(kazoo.get(paths.blob(shared))[0])
    assert keep in data["jobs"], "the two jobs were meant to share a bucket"
    data["jobs"][spoil]["spec"]["timeout"] = "@NAN@"
    spoiled = json.dumps(data).replace('"@NAN@"', "NaN").encode()
    kazoo.create(paths.blob(blob_id(spoiled)), spoiled)
    root_data = json.loads(kazoo.get(paths.jobs)[0])
    root_data["buckets"] = [blob_id(spoiled) if b == shared else b for b in root.buckets]
    kazoo.set(paths.jobs, json.dumps(root_data).encode(), version=root.version)
    spoiled_at = time.time()

    log.wait_for(lambda: started_after(log, keep, spoiled_at + 1) >= 3, 15)
    assert all(d.alive for d in group)
    listed = {
        r["name"]: r for r in json.loads(run_cli(zk, client_id, "jobs", "list", "--json").stdout)
    }
    assert listed[keep]["error"] is None
    assert "not finite" in listed[spoil]["error"], listed[spoil]
    assert started_after(log, spoil, spoiled_at + 2) == 0  # disabled: it runs nowhere
    refused = run_cli(zk, client_id, "jobs", "pause", spoil)  # nothing to pause: apply fixes it
    assert refused.returncode == 1 and "fix it with `jobs apply`" in refused.stderr, refused

    repaired = run_cli(zk, client_id, "jobs", "apply", str(jobfile))
    assert repaired.returncode == 0, repaired.stderr
    repaired_at = time.time()
    log.wait_for(lambda: started_after(log, spoil, repaired_at) >= 1, 15)
    assert log.duplicates() == {}


def same_bucket_names() -> tuple[str, str]:
    """Two job names a small table keeps in one bucket."""
    first = "keep"
    for i in range(1000):
        other = f"spoil-{i}"
        if bucket_index(other, MIN_BUCKETS) == bucket_index(first, MIN_BUCKETS):
            return first, other
    raise AssertionError("no two names share a bucket")


def test_a_commit_writes_again_under_a_new_id_a_bucket_changed_in_place(
    client_id: str, kazoo: KazooClient
) -> None:
    """A blob's id is its content's hash, and blobs never change: a bucket spoiled in place
    and then written again with the same jobs (`jobs apply` of the same file within the
    second) kept its id, so the spoiled node stayed, and every member's cached reading of it
    too. `test_a_change_never_drops_the_jobs_of_a_bucket_it_cannot_read` failed so, now and
    then."""
    paths = ClusterPaths(client_id)
    store = JobStore(kazoo, paths, 5.0)
    record = {"format": 1, "schedule": "@hourly", "command": ["/bin/true"]}
    table = {"a": StoredJob("a", record, "2026-01-01T00:00:00Z")}
    store.update(lambda _table: table)
    (spoiled,) = [b for b in store.read_root().buckets if b]
    kazoo.set(paths.blob(spoiled), b"\xff\xfe")
    root, read = store.read_table()
    assert read == {}  # its jobs left out
    store.commit(root, table)
    fresh = JobStore(kazoo, paths, 5.0)
    assert spoiled not in fresh.read_root().buckets
    assert fresh.read_table(whole=True)[1] == table
