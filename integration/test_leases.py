"""Job locks held across fires (zksched/runtime/leases.py) against a real server: one node
for many fires, exclusion between members, hand-back on ownership change, graceful stop and
a session that was given up for lost but lived on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from integration.harness import wait_until
from zksched.devtools.faultproxy import DELAY, DROP_REPLIES, PASS, RESET, FaultProxy
from zksched.runtime.leases import JobLeases
from zksched.zk.locks import JobLock, LockAttempt
from zksched.zk.paths import ClusterPaths


def member(
    zk_client: Callable[..., KazooClient],
    zk: str,
    client_id: str,
    name: str,
    session_timeout: float = 4.0,
    call_timeout: float = 3.0,
) -> tuple[KazooClient, JobLeases, int]:
    client = zk_client(zk, session_timeout=session_timeout)
    leases = JobLeases(client, ClusterPaths(client_id), name, call_timeout)
    return client, leases, client.client_id[0]


def idle_and_busy(leases: JobLeases, session: int) -> JobLock:
    """Own jobs `idle` (its lock taken ahead, no fire using it) and `busy` (a fire's)."""
    leases.set_owned({"idle", "busy"})
    leases.prepare("idle", session)
    assert leases.ready("idle", session)
    attempt, busy = leases.take("busy", session)
    assert attempt is LockAttempt.ACQUIRED and busy is not None
    return busy


def owns_and_takes(leases: JobLeases, job: str, session: int) -> None:
    """The member owns `job` and its lock is free for it: taken for a fire, then kept."""
    leases.set_owned({job})
    attempt, lock = leases.take(job, session)
    assert attempt is LockAttempt.ACQUIRED and lock is not None
    leases.give_back(job, lock, keep=True)


def contenders(kazoo: KazooClient, client_id: str, job: str) -> list[str]:
    return list(kazoo.get_children(ClusterPaths(client_id).job_lock(job)))


def test_one_lock_node_serves_many_fires_and_excludes_other_members(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    _, a, session_a = member(zk_client, zk, client_id, "m-a")
    _, b, session_b = member(zk_client, zk, client_id, "m-b")
    a.set_owned({"j"})
    for _ in range(5):  # five fires: the same lock, no new node
        attempt, lock = a.take("j", session_a)
        assert attempt is LockAttempt.ACQUIRED and lock is not None
        a.give_back("j", lock, keep=True)
    assert len(contenders(kazoo, client_id, "j")) == 1
    assert a.ready("j", session_a) and a.held_jobs() == ["j"]

    # Another member cannot run the job while `a` holds its lock, and is told who holds it.
    attempt, rival = b.take("j", session_b, wait=0.1)
    assert attempt is LockAttempt.HELD and rival is not None
    assert (rival.holder() or "").startswith("m-a/")
    assert len(contenders(kazoo, client_id, "j")) == 1  # its failed attempt left nothing

    # `a` no longer owns the job: the idle lock goes back and `b` gets it.
    a.set_owned(set())
    a.release_unowned()
    assert contenders(kazoo, client_id, "j") == [] and a.held_jobs() == []
    owns_and_takes(b, "j", session_b)


def test_a_busy_lock_is_kept_from_a_second_fire_and_given_back_after_ownership_moved(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    _, a, session = member(zk_client, zk, client_id, "m-a")
    a.set_owned({"j"})
    attempt, running = a.take("j", session)
    assert attempt is LockAttempt.ACQUIRED and running is not None
    # the same job's next fire while the run goes on: our own run still holds it
    started = time.monotonic()
    assert a.take("j", session, wait=0.2) == (LockAttempt.HELD, None)
    assert time.monotonic() - started >= 0.15

    # a run that ends within the wait hands the lock straight over
    later: list[object] = []
    waiter = threading.Thread(target=lambda: later.append(a.take("j", session, wait=2.0)))
    waiter.start()
    time.sleep(0.1)
    a.give_back("j", running, keep=True)
    waiter.join(5)
    assert later and later[0] == (LockAttempt.ACQUIRED, running)

    # ownership moved during the run: release_unowned leaves a busy lock alone ...
    a.set_owned(set())
    a.release_unowned()
    assert len(contenders(kazoo, client_id, "j")) == 1
    # ... and the end of the run gives it back
    a.give_back("j", running, keep=True)
    assert contenders(kazoo, client_id, "j") == [] and not running.held


def test_graceful_stop_gives_back_idle_locks_at_once_and_busy_ones_after_their_run(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    _, a, session = member(zk_client, zk, client_id, "m-a")
    busy = idle_and_busy(a, session)
    a.close()
    assert contenders(kazoo, client_id, "idle") == []
    assert len(contenders(kazoo, client_id, "busy")) == 1
    a.prepare("idle", session)  # nothing new is taken while stopping
    assert contenders(kazoo, client_id, "idle") == []
    a.give_back("busy", busy, keep=True)
    assert contenders(kazoo, client_id, "busy") == []


def test_locks_of_a_session_given_up_for_lost_that_lived_on_are_deleted(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    """The contact watchdog can give a session up before ZooKeeper does; if it survives,
    its lock nodes must not stay behind to block the jobs' next owners forever."""
    _, a, session = member(zk_client, zk, client_id, "m-a")
    a.set_owned({"j1", "j2"})
    for job in ("j1", "j2"):
        a.prepare(job, session)
    assert a.held_jobs() == ["j1", "j2"]
    a.session_lost()
    assert a.held_jobs() == [] and not a.ready("j1", session)
    # ZooKeeper answers again in the same session: the next reconcile deletes them
    a.release_unowned()
    wait_until(
        lambda: contenders(kazoo, client_id, "j1") == contenders(kazoo, client_id, "j2") == [],
        timeout=5,
        what="the surviving session's lock nodes to be deleted",
    )
    _, b, session_b = member(zk_client, zk, client_id, "m-b")
    attempt, lock = b.take("j1", session_b)
    assert attempt is LockAttempt.ACQUIRED and lock is not None


def test_a_fire_waits_for_a_lock_being_taken_ahead_instead_of_skipping(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[[str | None], FaultProxy],
    kazoo: KazooClient,
    client_id: str,
) -> None:
    """The lock is taken ahead of the fire (`prepare`) over a slow link; the fire, due while
    that is still going on, gets its outcome: nothing runs, so no `still-running` skip."""
    proxy = proxy_to(None)
    _, leases, session = member(zk_client, proxy.address, client_id, "m-a", 10.0, 5.0)
    leases.set_owned({"j"})
    proxy.set_mode(DELAY, 0.15)
    preparing = threading.Thread(target=leases.prepare, args=("j", session))
    preparing.start()
    time.sleep(0.1)  # prepare is now between its requests
    attempt, lock = leases.take("j", session)
    preparing.join(10)
    assert attempt is LockAttempt.ACQUIRED and lock is not None
    proxy.set_mode(PASS)
    leases.give_back("j", lock, keep=True)


def test_lock_nodes_that_could_not_be_deleted_are_kept_until_they_are(
    zk_client: Callable[..., KazooClient],
    proxy_to: Callable[[str | None], FaultProxy],
    kazoo: KazooClient,
    client_id: str,
) -> None:
    proxy = proxy_to(None)
    client, leases, session = member(zk_client, proxy.address, client_id, "m-a", 10.0, 0.5)
    leases.set_owned({"j"})
    leases.prepare("j", session)
    assert len(contenders(kazoo, client_id, "j")) == 1
    # the job moves away while ZooKeeper does not answer (the session lives on)
    leases.set_owned(set())
    proxy.set_mode(RESET)  # every connection attempt is cut: the delete fails at once
    wait_until(lambda: not client.connected, timeout=10, what="the client to notice")
    leases.release_unowned()  # not connected: nothing can be deleted, nothing is forgotten
    assert leases.held_jobs() == ["j"] or leases.has_leftovers()
    assert len(contenders(kazoo, client_id, "j")) == 1  # the session lives on, so does the node
    proxy.set_mode(PASS)
    wait_until(lambda: client.connected, timeout=10, what="the client to reconnect")
    wait_until(
        lambda: (leases.release_unowned(), contenders(kazoo, client_id, "j") == [])[1],
        timeout=10,
        what="the kept node to be deleted",
    )
    assert not leases.has_leftovers()


def test_a_lost_sessions_lock_still_used_by_a_run_is_deleted_only_after_the_run(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    _, a, session = member(zk_client, zk, client_id, "m-a")
    running = idle_and_busy(a, session)
    a.session_lost()  # given up for lost; the session in fact lives on
    a.release_unowned()
    assert contenders(kazoo, client_id, "idle") == []
    assert len(contenders(kazoo, client_id, "busy")) == 1  # its run still goes on
    a.give_back("busy", running, keep=True)
    a.release_unowned()
    assert contenders(kazoo, client_id, "busy") == []


def test_a_lock_delete_that_fails_is_kept_and_retried(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    _, leases, _ = member(zk_client, zk, client_id, "m-a")
    folder = f"{ClusterPaths(client_id).job_lock('j')}"
    node = kazoo.create(f"{folder}/x-lock-", b"", makepath=True, sequence=True)
    kazoo.set_acls(folder, [make_acl("world", "anyone", read=True, admin=True)])  # no deletes
    leases._release_all([], [node])
    assert leases.has_leftovers()
    kazoo.set_acls(folder, OPEN_ACL_UNSAFE)
    leases.release_unowned()
    assert not leases.has_leftovers() and not kazoo.exists(node)


def test_a_contender_a_failed_attempt_left_behind_is_deleted_once_zookeeper_answers(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    zk: str,
    client_id: str,
    proxy_to: Callable[..., FaultProxy],
) -> None:
    """The lock attempt's create lands but its reply is lost, and deleting that contender
    fails too (still cut off). If the job then moves away, this member never tries its lock
    again, and the contender blocks the job on every member for as long as the session lives
    (CI's partition chaos test: 24 instants of one job lost, 'waiting for vm-X to let go').
    And the attempt itself must give up: kazoo's Lock, left alone, waits for the answer."""
    proxy = proxy_to()
    client = zk_client(proxy.address, session_timeout=8.0)
    a = JobLeases(client, ClusterPaths(client_id), "m-a", 1.0)
    session = client.client_id[0]
    a.set_owned({"j"})
    attempt, lock = a.take("j", session)  # the folder exists: the create goes out first
    assert attempt is LockAttempt.ACQUIRED and lock is not None
    a.release_many([("j", lock)])
    assert contenders(kazoo, client_id, "j") == []

    proxy.set_mode(DROP_REPLIES)  # requests reach ZooKeeper; no answer comes back
    taken: list[tuple[LockAttempt, JobLock | None]] = []
    attempt_thread = threading.Thread(target=lambda: taken.append(a.take("j", session)))
    attempt_thread.start()
    attempt_thread.join(30)
    # kazoo's Lock retries with blocking calls that wait while the connection is down
    assert taken, "the lock attempt hung while ZooKeeper did not answer"
    assert taken[0][0] is LockAttempt.UNKNOWN
    wait_until(lambda: contenders(kazoo, client_id, "j"), 5, what="the create to land")
    a.set_owned(set())  # the job moved to another member
    assert a.has_leftovers()  # so the scheduler keeps calling release_unowned

    proxy.set_mode(PASS)
    wait_until(
        lambda: client.connected and client.client_id[0] == session, 10, what="same session back"
    )
    a.release_unowned()
    assert contenders(kazoo, client_id, "j") == []
    assert not a.has_leftovers()
    _, b, session_b = member(zk_client, zk, client_id, "m-b")
    owns_and_takes(b, "j", session_b)


def test_no_lock_is_taken_ahead_for_a_job_no_longer_owned(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    """A member alone at start owns every job for a moment and queues their lock takes;
    those that run after the others joined must not take locks of jobs now theirs."""
    _, a, session = member(zk_client, zk, client_id, "m-a")
    a.set_owned({"kept"})
    a.prepare("moved", session)
    a.prepare("kept", session)
    assert a.held_jobs() == ["kept"]
    assert kazoo.exists(ClusterPaths(client_id).job_lock("moved")) is None  # not even tried
