"""Fires due together (FirePath.fire_many), against a real ZooKeeper, in one process: their
claims go out as a small first transaction and then the rest (firing.FIRST_CLAIMS), a lost
reply is settled and run once, and their results wait until a moment after their starts
(firing.SETTLE), so that a burst's result writes, lock releases and log lines stay off the
cluster's claims and starts."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kazoo.handlers.threading import KazooTimeoutError

from integration.fires import FireLog, recording_job
from integration.harness import member_with_jobs, run_cli, wait_until
from zksched.core.firekey import format_utc
from zksched.core.fires import FireRecord
from zksched.runtime.daemon import Daemon
from zksched.runtime.firing import CLAIM_BATCH, FIRST_CLAIMS, LOCK_WAIT, SETTLE
from zksched.runtime.results import MAX_HOLD

JOBS = ("s-0", "s-1", "s-2")


def start_member(zk: str, client_id: str, tmp_path: Path, jobs: tuple[str, ...]) -> Daemon:
    """An in-process member owning `jobs`: yearly jobs, which the timer leaves alone while
    a test fires them by hand, each recording its runs in tmp_path/fires.log."""
    text = "".join(
        recording_job(name, tmp_path / "fires.log", schedule="0 0 1 1 *") for name in jobs
    )
    daemon = member_with_jobs(zk, client_id, tmp_path, text)
    wait_until(lambda: daemon.scheduler.owned_jobs() == sorted(jobs), 30, what="owning")
    return daemon


@pytest.fixture
def member(zk: str, client_id: str, tmp_path: Path) -> Iterator[Daemon]:
    daemon = start_member(zk, client_id, tmp_path, JOBS)
    try:
        yield daemon
    finally:
        daemon.stop()


def state_of(daemon: Daemon, job: str, instant: datetime) -> str:
    raw, _ = daemon.client.get(daemon.paths.fire(job, format_utc(instant)))
    return FireRecord.from_json(raw).state


def fire_together(
    daemon: Daemon, instant: datetime, jobs: tuple[str, ...] = JOBS
) -> tuple[float, float]:
    """Fire `jobs` at `instant` as one batch; returns when the batch began and when their
    starts were done."""
    specs = [daemon.jobs.snapshot.entries[name].spec for name in jobs]
    due = [(spec, instant, instant.timestamp()) for spec in specs if spec is not None]
    for spec, _, _ in due:  # their locks at hand, as the timer takes them ahead
        daemon.fire_path.prepare(spec.name, daemon.cluster.view.session_id or 0)
    began = time.monotonic()
    assert daemon.fire_path.fire_many(due) == []
    return began, time.monotonic()


def slow_starts(daemon: Daemon, seconds: float) -> None:
    """Make a batch's starts take `seconds` more, as a burst's do."""
    real = daemon.fire_path._start_all

    def start_all(fires):  # type: ignore[no-untyped-def]
        time.sleep(seconds)
        real(fires)

    daemon.fire_path._start_all = start_all  # type: ignore[method-assign]


def test_results_of_fires_due_together_wait_a_moment_after_their_starts(
    member: Daemon, tmp_path: Path
) -> None:
    instant = datetime(2030, 1, 1, tzinfo=UTC)
    slow_starts(member, 0.8)
    began, started = fire_together(member, instant)
    took = started - began  # the batch's own time (not its locks' taking ahead)
    log = FireLog(tmp_path / "fires.log")
    log.wait_for(lambda: len(log.fire_keys()) == 3, 10)
    wait_until(
        lambda: all(state_of(member, job, instant) == "ok" for job in JOBS),
        MAX_HOLD + 10,
        what="the results",
    )
    # not before as long again as the batch took (a slow machine can only make it later)
    assert time.monotonic() - started >= min(SETTLE, took) - 0.05
    # the locks of these yearly jobs went back with the results
    wait_until(lambda: not member.fire_path.leases.held_jobs(), 10, what="the locks back")


def test_a_stopping_member_writes_its_results_without_waiting(member: Daemon) -> None:
    slow_starts(member, 2.0)
    fire_together(member, datetime(2031, 1, 1, tzinfo=UTC))
    assert member.fire_path._results_wait()  # right after a batch: results wait
    member.fire_path.leases.close()  # what a graceful stop does first
    assert not member.fire_path._results_wait()


def test_the_first_claims_go_alone_and_the_rest_after(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    jobs = tuple(f"b-{i:03d}" for i in range(FIRST_CLAIMS + CLAIM_BATCH + 10))
    daemon = start_member(zk, client_id, tmp_path, jobs)
    try:
        instant = datetime(2030, 1, 1, tzinfo=UTC)
        fire_together(daemon, instant, jobs)
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: len(log.fire_keys()) == len(jobs), 30)
    finally:
        daemon.stop()
    assert log.duplicates() == {}
    # fires claimed in one transaction share its fencing token
    by_token = Counter(token for job in jobs for _, token in log.tokens(job))
    assert [by_token[t] for t in sorted(by_token)] == [FIRST_CLAIMS, CLAIM_BATCH, 10]


@pytest.mark.parametrize("failure", ["reply lost", "not sent"])
def test_claims_after_the_first_that_fail_are_settled_and_run_once(
    zk: str, client_id: str, tmp_path: Path, failure: str
) -> None:
    """The transactions after the first one land but their replies are lost, or they are
    never sent (the connection went between the first reply and the rest): those fires are
    skipped `claim-error`, then found to be ours (or still free) and run late, each exactly
    once."""
    jobs = tuple(f"l-{i:03d}" for i in range(FIRST_CLAIMS + 20))
    daemon = start_member(zk, client_id, tmp_path, jobs)
    claims = daemon.fire_path.claims
    real_answers, real_send = claims.answers, claims.send_batches
    calls = []

    def answers(sent):  # type: ignore[no-untyped-def]
        calls.append(len(sent))
        if len(calls) == 1:
            return real_answers(sent)
        landed = list(real_answers(sent))  # applied on the server...
        assert all(isinstance(outcome, list) for outcome in landed)
        return iter([KazooTimeoutError("injected: the reply was lost")] * len(sent))  # ...lost

    def send_batches(batches, payloads=None):  # type: ignore[no-untyped-def]
        calls.append(len(batches))
        if len(calls) == 1:
            return real_send(batches, payloads)
        raise KazooTimeoutError("injected: the connection went before the rest was sent")

    if failure == "reply lost":
        claims.answers = answers  # type: ignore[method-assign]
    else:
        claims.send_batches = send_batches  # type: ignore[method-assign]
    try:
        fire_together(daemon, datetime(2030, 1, 1, tzinfo=UTC), jobs)
        assert calls == [1, 1]
        lost = jobs[FIRST_CLAIMS:]
        assert sum(daemon.skips.by_job[(job, "claim-error")] for job in lost) == len(lost)
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: len(log.fire_keys()) == len(jobs), 30)
        time.sleep(1.0)  # no second run comes after
        assert len(log.fire_keys()) == len(jobs)
        assert log.duplicates() == {}
    finally:
        daemon.stop()


def test_fires_whose_locks_are_not_held_yet_are_claimed_together(
    member: Daemon, tmp_path: Path
) -> None:
    """Jobs just taken over (or applied) have no lock here yet at their first fires: the
    locks are taken all at once and the fires claimed in one transaction, not handed back
    to be fired one by one."""
    instant = datetime(2030, 1, 1, tzinfo=UTC)
    specs = [member.jobs.snapshot.entries[name].spec for name in JOBS]
    due = [(spec, instant, instant.timestamp()) for spec in specs if spec is not None]
    assert not member.fire_path.leases.held_jobs()
    assert member.fire_path.fire_many(due) == []
    log = FireLog(tmp_path / "fires.log")
    log.wait_for(lambda: len(log.fire_keys()) == len(JOBS), 10)
    assert log.duplicates() == {}
    tokens = {token for job in JOBS for _, token in log.tokens(job)}
    assert len(tokens) == 1, "claimed in one transaction"


def test_fires_whose_previous_fires_give_their_locks_back_soon_are_claimed_together(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    """g-0 and g-1's previous fires give their locks back within LOCK_WAIT: claimed together
    after the others (g-3, g-4). g-2's does not: handed back, to be fired one by one (which
    waits for it, and skips `still-running` if it keeps it), and not claimed here."""
    jobs = tuple(f"g-{i}" for i in range(5))
    daemon = start_member(zk, client_id, tmp_path, jobs)
    leases = daemon.fire_path.leases
    session = daemon.cluster.view.session_id or 0
    try:
        for job in jobs:
            daemon.fire_path.prepare(job, session)
        previous = {job: leases.take_if_held(job, session) for job in jobs[:3]}
        assert all(previous.values())

        def give_back_two() -> None:
            time.sleep(LOCK_WAIT / 3)
            for job in jobs[:2]:
                lock = previous[job]
                assert lock is not None
                leases.give_back(job, lock, keep=True)

        threading.Thread(target=give_back_two, daemon=True).start()
        instant = datetime(2030, 1, 1, tzinfo=UTC)
        specs = {name: daemon.jobs.snapshot.entries[name].spec for name in jobs}
        due = [(spec, instant, instant.timestamp()) for spec in specs.values() if spec is not None]
        rest = daemon.fire_path.fire_many(due)
        assert [(spec.name, when) for spec, when, _ in rest] == [("g-2", instant)]
        held = previous["g-2"]
        assert held is not None
        leases.give_back("g-2", held, keep=True)

        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: len(log.fire_keys()) == 4, 10)
        time.sleep(0.5)
        token = {job: [t for _, t in log.tokens(job)] for job in jobs}
        assert token["g-2"] == []
        assert daemon.client.exists(daemon.paths.fire("g-2", format_utc(instant))) is None
        assert token["g-0"] == token["g-1"] and token["g-3"] == token["g-4"]
        assert token["g-0"] != token["g-3"]
        assert log.duplicates() == {}
    finally:
        daemon.stop()


def test_a_later_instant_of_a_job_goes_behind_an_earlier_one_handed_back(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    """o-x's fire at T is handed back to be fired one by one (its previous fire keeps the
    lock past LOCK_WAIT). At T+1 the lock is free, yet that fire is handed back too, behind
    T's, so that no instant of a job is claimed before an earlier one (a member killed
    then would leave a hole behind its newest record, which no catch-up fills)."""
    jobs = ("o-x", "o-a", "o-b")
    daemon = start_member(zk, client_id, tmp_path, jobs)
    leases, fire_path = daemon.fire_path.leases, daemon.fire_path
    session = daemon.cluster.view.session_id or 0
    specs = {name: daemon.jobs.snapshot.entries[name].spec for name in jobs}
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    t1 = datetime(2031, 1, 1, tzinfo=UTC)

    def due(instant: datetime) -> list[tuple[Any, datetime, float]]:
        return [(s, instant, instant.timestamp()) for s in specs.values() if s is not None]

    try:
        for job in jobs:
            fire_path.prepare(job, session)
        previous = leases.take_if_held("o-x", session)
        assert previous is not None
        assert [(s.name, i) for s, i, _ in fire_path.fire_many(due(t0))] == [("o-x", t0)]
        leases.give_back("o-x", previous, keep=True)
        # the others' yearly locks go back with their results: taken again, so that without
        # the rule all three would go together
        wait_until(lambda: not any(map(leases.in_use, jobs)), 10, what="locks back")
        for job in jobs:
            fire_path.prepare(job, session)
        assert [(s.name, i) for s, i, _ in fire_path.fire_many(due(t1))] == [("o-x", t1)]
        x = specs["o-x"]
        assert x is not None
        assert fire_path.fire_handed_back(x, t0, t0.timestamp()) == "started"
        assert fire_path.fire_handed_back(x, t1, t1.timestamp()) == "started"
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: len(log.fire_keys()) == 6, 10)
        tokens = dict(log.tokens("o-x"))
        assert tokens[t0] < tokens[t1]
        t2 = datetime(2032, 1, 1, tzinfo=UTC)  # nothing handed back any more: together
        wait_until(lambda: not any(map(leases.in_use, jobs)), 10, what="locks back")
        assert fire_path.fire_many(due(t2)) == []
        log.wait_for(lambda: len(log.fire_keys()) == 9, 10)
        assert log.duplicates() == {}
    finally:
        daemon.stop()


def test_a_fire_whose_lease_another_fire_holds_is_retried_not_skipped(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    """The job's lease is busy here, but no command of the job runs: another fire of it has
    it (a later instant that got in first while this one waited for a lock held elsewhere,
    seen in CI's burst test). That is no `still-running` skip, which was recorded and lost
    the instant for good: it is retried, and runs once the lease is free."""
    daemon = start_member(zk, client_id, tmp_path, ("l-0",))
    leases = daemon.fire_path.leases
    session = daemon.cluster.view.session_id or 0
    try:
        daemon.fire_path.prepare("l-0", session)
        other = leases.take_if_held("l-0", session)  # the other fire
        assert other is not None
        spec = daemon.jobs.snapshot.entries["l-0"].spec
        assert spec is not None
        instant = datetime(2032, 1, 1, tzinfo=UTC)
        assert daemon.fire_path.fire(spec, instant, wait=False) == "deferred"
        assert daemon.client.exists(daemon.paths.fire("l-0", format_utc(instant))) is None
        assert daemon.skips.counts["still-running"] == 0
        leases.give_back("l-0", other, keep=True)
        daemon.fire_path.retry_unresolved()
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: log.fire_keys() == [f"l-0@{format_utc(instant)}"], 10)
    finally:
        daemon.stop()


def retried_in_order(
    daemon: Daemon, log: FireLog, job: str, earlier: datetime, later: datetime
) -> None:
    """Retry passes until both deferred instants of `job` ran: `earlier` first (its fencing
    token is the smaller), and neither was skipped `still-running`."""
    keys = [f"{job}@{format_utc(earlier)}", f"{job}@{format_utc(later)}"]

    def settle() -> bool:
        daemon.fire_path.retry_unresolved()
        return all(key in log.fire_keys() for key in keys)

    wait_until(settle, 15, what=f"both instants of {job}, in order")
    tokens = dict(log.tokens(job))
    assert tokens[earlier] < tokens[later]
    assert daemon.skips.counts["still-running"] == 0


def test_while_a_fire_is_deferred_the_jobs_later_instants_wait_behind_it(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    """A deferred fire (its job's lease busy, no command of the job running) holds the
    job's later instants back until it is settled: one of them taking the lease first and
    running would make the deferred one a `still-running` skip, lost although no run of the
    job was going on when its turn came."""
    daemon = start_member(zk, client_id, tmp_path, ("l-0", "l-1", "l-2"))
    leases = daemon.fire_path.leases
    session = daemon.cluster.view.session_id or 0
    fire_path = daemon.fire_path
    try:
        specs = {}
        for name in ("l-0", "l-1", "l-2"):
            fire_path.prepare(name, session)
            spec = daemon.jobs.snapshot.entries[name].spec
            assert spec is not None
            specs[name] = spec
        other = leases.take_if_held("l-0", session)  # another fire has l-0's lease
        assert other is not None
        t0, t1 = datetime(2032, 1, 1, tzinfo=UTC), datetime(2032, 1, 1, 0, 0, 1, tzinfo=UTC)
        assert fire_path.fire(specs["l-0"], t0, wait=False) == "deferred"
        leases.give_back("l-0", other, keep=True)  # free now, but t0 has not been retried
        due = [(specs[n], t1, t1.timestamp()) for n in ("l-0", "l-1", "l-2")]
        assert fire_path.fire_many(due) == [due[0]]  # l-0's t1 waits behind t0
        assert daemon.client.exists(daemon.paths.fire("l-0", format_utc(t1))) is None
        # handed back and fired on its own, it still waits behind t0
        assert fire_path.fire_handed_back(*due[0]) == "deferred"
        assert daemon.client.exists(daemon.paths.fire("l-0", format_utc(t1))) is None
        log = FireLog(tmp_path / "fires.log")
        retried_in_order(daemon, log, "l-0", t0, t1)
        assert log.duplicates() == {}
        wait_until(lambda: not fire_path.has_pending(), 10, what="nothing left to retry")
        with fire_path._running_lock:
            assert not fire_path._handed_back  # every hold was given back
    finally:
        daemon.stop()


def test_a_deferred_fire_being_retried_still_holds_later_instants_back(
    zk: str, client_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry pass takes the deferred fires off the queue; until each one is settled the
    job's later instants still wait behind it (a later one that took the lock in between
    would make it a `still-running` skip); and the job's spec it fires with is the current
    one: a job paused meanwhile is not fired."""
    daemon = start_member(zk, client_id, tmp_path, ("l-0", "l-1"))
    leases = daemon.fire_path.leases
    session = daemon.cluster.view.session_id or 0
    fire_path = daemon.fire_path
    try:
        fire_path.prepare("l-0", session)
        spec = daemon.jobs.snapshot.entries["l-0"].spec
        assert spec is not None
        other = leases.take_if_held("l-0", session)
        assert other is not None
        t0, t2 = datetime(2032, 1, 1, tzinfo=UTC), datetime(2032, 1, 1, 0, 0, 2, tzinfo=UTC)
        assert fire_path.fire(spec, t0, wait=False) == "deferred"
        leases.give_back("l-0", other, keep=True)
        entered, go = threading.Event(), threading.Event()
        real_take = leases.take

        def slow_take(job: str, *args: Any, **kwargs: Any) -> Any:
            if job == "l-0" and not entered.is_set():
                entered.set()
                go.wait(10)
            return real_take(job, *args, **kwargs)

        monkeypatch.setattr(leases, "take", slow_take)
        settling = threading.Thread(target=fire_path.retry_unresolved)
        settling.start()
        assert entered.wait(10)  # t0 is being settled, off the queue
        assert fire_path.fire_handed_back(spec, t2, t2.timestamp()) == "deferred"
        fire_path.retry_unresolved()  # a second pass meanwhile: t2 waits behind t0 again
        go.set()
        settling.join(10)
        log = FireLog(tmp_path / "fires.log")
        retried_in_order(daemon, log, "l-0", t0, t2)

        # deferred, then the job is paused: the retry fires with the job as it is now
        spec1 = daemon.jobs.snapshot.entries["l-1"].spec
        assert spec1 is not None
        fire_path.prepare("l-1", session)
        held = leases.take_if_held("l-1", session)
        assert held is not None
        assert fire_path.fire(spec1, t0, wait=False) == "deferred"
        leases.give_back("l-1", held, keep=True)
        assert run_cli(zk, client_id, "jobs", "pause", "l-1").returncode == 0

        def paused() -> bool:
            entry = daemon.jobs.snapshot.entries["l-1"]
            return entry.spec is not None and entry.spec.paused

        wait_until(paused, 10, what="paused")
        wait_until(lambda: (fire_path.retry_unresolved(), not fire_path.has_pending())[1], 10)
        assert "l-1" not in "".join(log.fire_keys())
        assert daemon.skips.counts["paused"] == 1
        with fire_path._running_lock:
            assert not fire_path._handed_back
    finally:
        daemon.stop()


def test_a_retry_that_fails_to_settle_leaves_the_rest_of_the_pass_alone(
    zk: str, client_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error while settling one deferred fire (a bug, an error kazoo's own
    loop raised) must not take the rest of the pass with it: the others are settled, and
    the failed one stays queued, still holding its job's later instants back."""
    daemon = start_member(zk, client_id, tmp_path, ("l-0", "l-1"))
    leases = daemon.fire_path.leases
    session = daemon.cluster.view.session_id or 0
    fire_path = daemon.fire_path
    try:
        t0 = datetime(2032, 1, 1, tzinfo=UTC)
        specs = {}
        for name in ("l-0", "l-1"):
            fire_path.prepare(name, session)
            spec = daemon.jobs.snapshot.entries[name].spec
            assert spec is not None
            specs[name] = spec
            other = leases.take_if_held(name, session)
            assert other is not None
            assert fire_path.fire(spec, t0, wait=False) == "deferred"
            leases.give_back(name, other, keep=True)
        real_settle = fire_path._settle

        def settle(retry: Any) -> None:
            if retry.spec.name == "l-0":
                raise RuntimeError("injected: settling l-0 failed")
            real_settle(retry)

        monkeypatch.setattr(fire_path, "_settle", settle)
        fire_path.retry_unresolved()
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: log.fire_keys() == [f"l-1@{format_utc(t0)}"], 10)
        assert fire_path.has_pending()  # l-0's, queued again
        t1 = datetime(2032, 1, 1, 0, 0, 1, tzinfo=UTC)
        assert fire_path.fire(specs["l-0"], t1, wait=False) == "deferred"  # behind t0
        monkeypatch.undo()
        retried_in_order(daemon, log, "l-0", t0, t1)
        with fire_path._running_lock:
            assert not fire_path._settling and not fire_path._handed_back
    finally:
        daemon.stop()


def test_fires_whose_locks_came_late_are_claimed_one_by_one_as_late_claims(
    zk: str, client_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fires due together whose locks took BATCH_CLAIM_AGE or more to come by are not
    claimed with the batch's plain creates: they go back, to be claimed one by one through
    the pruning horizon's check (20 s in the daemon; 0.5 s here)."""
    from zksched.runtime import firing

    jobs = ("s-0", "s-1", "s-2", "s-3")
    daemon = start_member(zk, client_id, tmp_path, jobs)
    fire_path = daemon.fire_path
    leases = fire_path.leases
    session = daemon.cluster.view.session_id or 0
    try:
        monkeypatch.setattr(firing, "BATCH_CLAIM_AGE", 0.5)
        for name in jobs[:2]:
            fire_path.prepare(name, session)  # held: claimed at once
        wait_until(lambda: all(leases.ready(n, session) for n in jobs[:2]), 10, what="locks")
        real_take = leases.take

        def slow_take(job: str, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.7)
            return real_take(job, *args, **kwargs)

        monkeypatch.setattr(leases, "take", slow_take)
        instant = datetime.fromtimestamp(int(time.time()) + 1, UTC)
        specs = {n: daemon.jobs.snapshot.entries[n].spec for n in jobs}
        time.sleep(max(0.0, instant.timestamp() - time.time()))  # fresh at the batch's start
        due = [(specs[n], instant, instant.timestamp()) for n in jobs]
        rest = fire_path.fire_many(due)  # type: ignore[arg-type]
        # their locks came too late: not claimed together, but handed back
        assert sorted(spec.name for spec, _, _ in rest) == list(jobs[2:])
        scheduled = format_utc(instant)
        for name in jobs[2:]:
            assert daemon.client.exists(daemon.paths.fire(name, scheduled)) is None
            assert not leases.in_use(name)  # its lock went back, for the one-by-one fire
        monkeypatch.undo()
        for fire in rest:
            assert fire_path.fire_handed_back(*fire) == "started"
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: len(log.fire_keys()) == 4, 10)
        assert log.duplicates() == {}
    finally:
        daemon.stop()


def test_an_instant_fired_late_that_another_member_ran_and_pruned_is_not_run_again(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    """A fire seconds behind its instant (a retry, a fire handed back, a catch-up) may find
    its record gone because another member ran it and pruned it meanwhile (the job moved
    away and back). Its claim checks the pruning horizon: refused, not run a second time."""
    from zksched.zk.claims import FireClaims

    daemon = start_member(zk, client_id, tmp_path, ("l-0",))
    try:
        spec = daemon.jobs.snapshot.entries["l-0"].spec
        assert spec is not None
        instant = datetime.fromtimestamp(int(time.time()) - 30, UTC)
        scheduled = format_utc(instant)
        other = FireClaims(daemon.client, daemon.paths, 3.0)  # the other member's claims
        theirs = FireRecord(
            job="l-0",
            scheduled=scheduled,
            member_id="m-other",
            session=1,
            nonce="theirs",
            state="ok",
            claimed_at=scheduled,
        )
        other.claim(theirs)
        assert other.prune("l-0", [scheduled])
        assert daemon.fire_path.fire(spec, instant, wait=False) == "skip:already-claimed"
        assert daemon.client.exists(daemon.paths.fire("l-0", scheduled)) is None
        # a late instant newer than the horizon is claimed and runs, as before
        later = datetime.fromtimestamp(int(time.time()) - 20, UTC)
        assert daemon.fire_path.fire(spec, later, wait=False) == "started"
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: log.fire_keys() == [f"l-0@{format_utc(later)}"], 10)
    finally:
        daemon.stop()


def test_a_confirmed_claim_whose_lease_another_fire_holds_waits_for_it(
    zk: str, client_id: str, tmp_path: Path
) -> None:
    """A claim whose reply was lost is found to be ours later (`retry_unresolved`); if
    another fire of the job has its lease then and no command of it runs, the claim waits
    for the lease instead of being recorded `still-running` (which lost it)."""
    from zksched.runtime.firing import _Retry
    from zksched.zk.claims import Claimed

    daemon = start_member(zk, client_id, tmp_path, ("r-0",))
    fire_path = daemon.fire_path
    session = daemon.cluster.view.session_id or 0
    try:
        fire_path.prepare("r-0", session)
        spec = daemon.jobs.snapshot.entries["r-0"].spec
        assert spec is not None
        instant = datetime(2033, 1, 1, tzinfo=UTC)
        record = fire_path._new_record("r-0", format_utc(instant), session, "running", "scheduled")
        assert isinstance(fire_path.claims.claim(record), Claimed)  # landed; the reply "lost"
        fire_path._queue_retry(_Retry(spec, instant, "scheduled", instant.timestamp(), record))
        other = fire_path.leases.take_if_held("r-0", session)  # the other fire
        assert other is not None
        fire_path.retry_unresolved()
        assert state_of(daemon, "r-0", instant) == "running"  # not made a skip
        fire_path.leases.give_back("r-0", other, keep=True)
        fire_path.retry_unresolved()
        log = FireLog(tmp_path / "fires.log")
        log.wait_for(lambda: log.fire_keys() == [f"r-0@{format_utc(instant)}"], 10)
    finally:
        daemon.stop()
