"""Claims and locks against a real server: lost replies, fencing, orphans, vanishing locks."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from integration.harness import wait_until
from tools.faultproxy import DROP_REPLIES, PASS, FaultProxy
from zksched.core.firekey import format_utc
from zksched.core.firerecord import FireRecord
from zksched.zk.claims import AlreadyClaimed, Claimed, FireClaims
from zksched.zk.locks import HeldLocks, JobLock, LockAttempt
from zksched.zk.paths import ClusterPaths


def record(job: str, instant: str, nonce: str, member: str = "m-1") -> FireRecord:
    return FireRecord(
        job=job,
        scheduled=instant,
        member_id=member,
        session=1,
        nonce=nonce,
        state="running",
        claimed_at="2026-01-01T00:00:00.000Z",
    )


def meanwhile(
    monkeypatch: pytest.MonkeyPatch, client: KazooClient, path: str, action: Callable[[], object]
) -> None:
    """The first read of `path` through `client` answers, then `action` runs (another member
    acting between our read and our write), then the read returns."""
    real_get = client.get_async
    done: list[bool] = []

    def get_then_act(read: str, watch: object = None) -> object:
        result = real_get(read, watch)
        if read == path and not done:
            result.get(timeout=5)
            done.append(True)
            action()
        return result

    monkeypatch.setattr(client, "get_async", get_then_act)


def test_claim_once_and_fencing_tokens_grow(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    claims = FireClaims(zk_client(zk, session_timeout=4.0), ClusterPaths(client_id), 3.0)
    first = claims.claim(record("j", "2026-01-01T00:00:00Z", "a"))
    assert isinstance(first, Claimed)
    rival = claims.claim(record("j", "2026-01-01T00:00:00Z", "b", member="m-2"))
    assert isinstance(rival, AlreadyClaimed) and rival.record is not None
    assert rival.record.member_id == "m-1"
    again = claims.claim(record("j", "2026-01-01T00:00:00Z", "a"))  # our own, reply lost
    assert isinstance(again, Claimed) and again.fencing_token == first.fencing_token
    later = claims.claim(record("j", "2026-01-01T00:00:01Z", "c", member="m-2"))
    assert isinstance(later, Claimed) and later.fencing_token > first.fencing_token


def test_claim_whose_reply_was_lost_is_recognised(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    proxy = proxy_to()
    client = zk_client(proxy.address, session_timeout=4.0)
    paths = ClusterPaths(client_id)
    claims = FireClaims(client, paths, 1.0)
    mine = record("j", "2026-01-01T00:00:00Z", "nonce-1")
    client.ensure_path(paths.job_fires("j"))
    proxy.set_mode(DROP_REPLIES)
    with pytest.raises((KazooException, KazooTimeoutError)):
        claims.claim(mine)
    assert kazoo.exists(paths.fire("j", "2026-01-01T00:00:00Z"))  # it did land
    proxy.set_mode(PASS)
    wait_until(lambda: client.state == KazooState.CONNECTED, 10, what="reconnected")
    outcome = wait_until(lambda: _resolve(claims, mine), 10, what="resolved")
    assert isinstance(outcome, Claimed)
    assert kazoo.get_children(paths.job_fires("j")) == ["2026-01-01T00:00:00Z"]


def _resolve(claims: FireClaims, mine: FireRecord) -> Claimed | AlreadyClaimed | None:
    try:
        return claims.resolve(mine)
    except (KazooException, KazooTimeoutError):
        return None


def test_a_first_fire_claim_given_up_never_lands_after_its_resolve_found_nothing(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    """A job's first claim meets no fire folder. If the wait for its reply gives up and a
    resolve then finds no record, no create of that attempt may land later (kazoo's makepath
    would send one from a callback, behind the resolve: the instant's record would then be
    ours but unknown to us, `running` forever)."""
    client = zk_client(zk)
    paths = ClusterPaths(client_id)
    impatient = FireClaims(client, paths, 0.000_01)  # gives up before any reply
    patient = FireClaims(client, paths, 5.0)
    gave_up = 0
    for n in range(10):
        job = f"first-{n}"
        mine = record(job, "2026-01-01T00:00:00Z", f"nonce-{n}")
        try:
            impatient.claim(mine)
        except (KazooException, KazooTimeoutError):
            gave_up += 1
        else:
            continue  # answered within the blink: no lost reply to look at
        if patient.resolve(mine) is None:
            time.sleep(0.3)  # anything sent behind the resolve has landed by now
            assert not kazoo.exists(paths.fire(job, "2026-01-01T00:00:00Z"))
    assert gave_up > 0


def test_prune_keeps_the_rest(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    claims = FireClaims(zk_client(zk, session_timeout=4.0), ClusterPaths(client_id), 3.0)
    instants = [f"2026-01-01T00:00:0{i}Z" for i in range(6)]
    for i, instant in enumerate(instants):
        claims.claim(record("j", instant, f"n{i}"))
    assert claims.pruned_through("j") is None
    claims.prune("j", [*instants[:2], "2026-01-01T00:00:09Z"])  # one was never there
    assert claims.instants("j") == instants[2:]
    # the horizon covers what was pruned, and a later prune of older records never lowers it
    assert claims.pruned_through("j") == "2026-01-01T00:00:09Z"
    assert claims.prune("j", [instants[2]])
    assert claims.pruned_through("j") == "2026-01-01T00:00:09Z"
    assert claims.instants("j") == instants[3:]
    # both in one call, as a takeover reads them; a job without a fire folder has neither
    assert claims.history("j") == (instants[3:], "2026-01-01T00:00:09Z")
    assert claims.history("never-fired") == ([], None)
    claims.delete_job("j")
    assert claims.instants("j") == []
    assert claims.history("j") == ([], None)


def test_lock_excludes_detects_vanishing_and_clears_orphans(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    client = zk_client(zk, session_timeout=4.0)
    paths = ClusterPaths(client_id)
    held = HeldLocks()
    session = client.client_id[0]
    first = JobLock(client, paths, "j", "m-1", session, 3.0, held)
    assert first.try_acquire() is LockAttempt.ACQUIRED
    second = JobLock(client, paths, "j", "m-1", session, 3.0, held)
    started_at = time.monotonic()
    assert second.try_acquire(wait=0.2) is LockAttempt.HELD
    assert time.monotonic() - started_at < 3.0
    assert first.held and not first.lost  # a failed attempt never touches a held lock

    lost = threading.Event()
    first.on_lost(lost.set)
    for child in kazoo.get_children(paths.job_lock("j")):
        kazoo.delete(f"{paths.job_lock('j')}/{child}")  # pulled from under the run
    assert lost.wait(5)
    first.release()

    # An orphan of this session (a contender whose owner is gone) is cleared by the next try.
    orphan = JobLock(client, paths, "j", "m-1", session, 3.0, HeldLocks())
    assert orphan.try_acquire() is LockAttempt.ACQUIRED
    orphan.held = False  # forget it without releasing: kazoo #732's leftover
    third = JobLock(client, paths, "j", "m-1", session, 3.0, held)
    # the orphan holds it: the first attempt clears it on the way out, the retry gets it
    assert third.try_acquire(wait=0.1) is LockAttempt.ACQUIRED
    third.release()

    # A persistent node sorting first (never a member's: contenders are ephemeral) held the
    # job's lock for ever: the first attempt deletes it on the way out, the retry gets it.
    kazoo.create(f"{paths.job_lock('j')}/evil__lock__0000000000", b"evil\x1b[2J")
    kazoo.create(f"{paths.job_lock('j')}/evil__lock__0000000000/child", b"")  # not deletable alone
    fourth = JobLock(client, paths, "j", "m-1", session, 3.0, held)
    assert fourth.try_acquire(wait=0.1) is LockAttempt.ACQUIRED
    fourth.release()


def test_claims_in_one_transaction_apply_whole_or_not_at_all(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    paths = ClusterPaths(client_id)
    claims = FireClaims(zk_client(zk, session_timeout=4.0), paths, 3.0)
    first = claims.claim(record("a", "2026-01-01T00:00:00Z", "n0"))
    assert isinstance(first, Claimed)
    # a job whose fire folder does not exist yet (its first fire): made first, then claimed
    [made] = claims.claim_batches(
        [[record("a", "2026-01-01T00:00:01Z", "n1"), record("new", "2026-01-01T00:00:01Z", "n2")]]
    )
    assert made is not None and kazoo.exists(paths.fire("new", "2026-01-01T00:00:01Z"))
    claims.claim(record("b", "2026-01-01T00:00:00Z", "n3"))

    batch = [record("a", "2026-01-01T00:00:02Z", "n4"), record("b", "2026-01-01T00:00:01Z", "n5")]
    [done] = claims.claim_batches([batch])
    assert isinstance(done, list) and [c.record.nonce for c in done] == ["n4", "n5"]
    # one transaction: one zxid, the czxid of every record it created, above earlier claims
    token = done[0].fencing_token
    assert {c.fencing_token for c in done} == {token} and token > first.fencing_token
    for claimed in done:
        assert kazoo.exists(claimed.path).czxid == token
    later = claims.claim(record("a", "2026-01-01T00:00:03Z", "n6"))
    assert isinstance(later, Claimed) and later.fencing_token > token

    # one instant claimed already (by anyone): the whole batch is refused, nothing created
    rival = [record("a", "2026-01-01T00:00:03Z", "n7"), record("b", "2026-01-01T00:00:02Z", "n8")]
    assert claims.claim_batches([rival]) == [None]
    assert not kazoo.exists(paths.fire("b", "2026-01-01T00:00:02Z"))


def test_batched_claims_whose_replies_were_lost_are_recognised(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    """The replies of one instant's transactions are lost: each batch's outcome is an
    exception (unknown), never a guess; once connected again, each record resolves by its
    nonce as ours where it landed, and as absent where the connection dropped before the
    transaction went out (both happen: which, the machine's timing decides)."""
    proxy = proxy_to()
    client = zk_client(proxy.address, session_timeout=4.0)
    paths = ClusterPaths(client_id)
    claims = FireClaims(client, paths, 1.0)
    batches = [
        [record("j", "2026-01-01T00:00:00Z", "n1")],
        [record("j", "2026-01-01T00:00:01Z", "n2"), record("k", "2026-01-01T00:00:01Z", "n3")],
    ]
    # a first batch while all is well: the fence and the fire folders exist from then on
    [first] = claims.claim_batches([[record("j", "2025-12-31T00:00:00Z", "n0")]])
    assert isinstance(first, list)
    claims.ensure_folder("k")
    proxy.set_mode(DROP_REPLIES)
    outcomes = claims.claim_batches(batches)
    assert len(outcomes) == 2 and all(isinstance(o, Exception) for o in outcomes)
    time.sleep(1.0)  # what was sent has landed by now
    proxy.set_mode(PASS)
    wait_until(lambda: client.state == KazooState.CONNECTED, 10, what="reconnected")
    landed = 0
    for batch in batches:
        exists = [kazoo.exists(paths.fire(m.job, m.scheduled)) is not None for m in batch]
        assert len(set(exists)) == 1, "a transaction applied in part"
        for mine in batch:
            if exists[0]:
                outcome = wait_until(lambda m=mine: _resolve(claims, m), 10, what="resolved")
                assert isinstance(outcome, Claimed) and outcome.record.nonce == mine.nonce
                landed += 1
            else:
                assert claims.resolve(mine) is None
    assert landed >= 1  # the first transaction was written before the replies stopped


def test_a_prune_that_races_another_deletes_nothing(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    zk: str,
    client_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two members prune one job (an ownership change): the horizon is written with the
    version read, so the second writer's lower horizon can never replace a higher one; it
    deletes nothing and its records stay known for the next prune."""
    client = zk_client(zk, session_timeout=4.0)
    paths = ClusterPaths(client_id)
    claims = FireClaims(client, paths, 3.0)
    instants = [f"2026-01-01T00:00:0{i}Z" for i in range(6)]
    for i, instant in enumerate(instants):
        claims.claim(record("j", instant, f"n{i}"))
    other = json.dumps({"pruned_through": instants[3]}).encode()
    # the other member's horizon, in between
    meanwhile(
        monkeypatch, client, paths.job_fires("j"), lambda: kazoo.set(paths.job_fires("j"), other)
    )
    assert claims.prune("j", instants[:2]) is False
    monkeypatch.undo()
    assert claims.instants("j") == instants
    assert claims.pruned_through("j") == instants[3]


def test_a_late_claim_never_brings_back_a_pruned_instant(
    zk_client: Callable[..., KazooClient], kazoo: KazooClient, zk: str, client_id: str
) -> None:
    """An instant claimed late (a retry, a catch-up, a job that came back) is claimed only if
    it is newer than the job's pruning horizon: a plain create would make a record that was
    run and pruned meanwhile anew, and the instant would run twice."""
    paths = ClusterPaths(client_id)
    claims = FireClaims(zk_client(zk, session_timeout=4.0), paths, 3.0)
    fresh = claims.claim_late(record("j", "2026-01-01T00:00:00Z", "first"))  # no folder yet
    assert isinstance(fresh, Claimed)
    instants = [f"2026-01-01T00:00:0{i}Z" for i in range(1, 6)]
    for i, instant in enumerate(instants):
        claims.claim(record("j", instant, f"n{i}"))
    assert claims.prune("j", ["2026-01-01T00:00:00Z", instants[0]])
    # run, then pruned: refused, and nothing is created
    gone = claims.claim_late(record("j", instants[0], "again", member="m-2"))
    assert isinstance(gone, AlreadyClaimed) and gone.pruned
    assert not kazoo.exists(paths.fire("j", instants[0]))
    # behind the horizon too (it may have been pruned by a member whose list missed it)
    older = claims.claim_late(record("j", "2025-12-31T23:59:59Z", "older"))
    assert isinstance(older, AlreadyClaimed) and older.pruned
    # newer than the horizon: claimed, with a fencing token newer than every record's
    late = claims.claim_late(record("j", "2026-01-01T00:00:09Z", "late"))
    assert isinstance(late, Claimed)
    assert late.fencing_token > kazoo.exists(paths.fire("j", instants[-1])).czxid
    # one that exists: ours (a reply lost) or someone else's, as for a plain claim
    mine = claims.claim_late(record("j", "2026-01-01T00:00:09Z", "late"))
    assert isinstance(mine, Claimed) and mine.fencing_token == late.fencing_token
    theirs = claims.claim_late(record("j", instants[2], "rival", member="m-2"))
    assert isinstance(theirs, AlreadyClaimed) and not theirs.pruned
    assert theirs.record is not None and theirs.record.member_id == "m-1"


def test_a_prune_between_the_read_and_the_create_of_a_late_claim_wins(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    zk: str,
    client_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another member prunes the instant just after the late claim read the horizon: the
    create goes with a check of the folder's version, so it does not apply; read again, the
    horizon covers the instant and it is refused."""
    client = zk_client(zk, session_timeout=4.0)
    paths = ClusterPaths(client_id)
    claims = FireClaims(client, paths, 3.0)
    rival = FireClaims(kazoo, paths, 3.0)
    instants = ["2026-01-01T00:00:00Z"]
    claims.ensure_folder("j")
    pruned: list[bool] = []

    def the_other_runs_and_prunes() -> None:
        rival.claim(record("j", instants[0], "theirs", member="m-2"))
        pruned.append(rival.prune("j", [instants[0]]))

    meanwhile(monkeypatch, client, paths.job_fires("j"), the_other_runs_and_prunes)
    outcome = claims.claim_late(record("j", instants[0], "mine"))
    monkeypatch.undo()
    assert pruned == [True]
    assert isinstance(outcome, AlreadyClaimed) and outcome.pruned
    assert not kazoo.exists(paths.fire("j", instants[0]))


def test_a_late_claim_whose_reply_was_lost_is_recognised(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    """The late claim's transaction lands but its reply is lost: the outcome is unknown (an
    exception, never a guess), and once connected again the record resolves as ours, and a
    second late claim of it finds it ours too (not a second record)."""
    proxy = proxy_to()
    client = zk_client(proxy.address, session_timeout=4.0)
    paths = ClusterPaths(client_id)
    claims = FireClaims(client, paths, 1.0)
    assert isinstance(claims.claim_late(record("j", "2026-01-01T00:00:00Z", "n0")), Claimed)
    mine = record("j", "2026-01-01T00:00:05Z", "n1")
    real_commit = client.transaction

    def lose_the_reply() -> object:  # the folder's read answers; the transaction's reply not
        proxy.set_mode(DROP_REPLIES)
        return real_commit()

    client.transaction = lose_the_reply  # type: ignore[method-assign]
    with pytest.raises((KazooException, KazooTimeoutError)):
        claims.claim_late(mine)
    client.transaction = real_commit  # type: ignore[method-assign]
    path = paths.fire("j", mine.scheduled)
    wait_until(lambda: kazoo.exists(path), 10, what="the late claim to land")
    proxy.set_mode(PASS)
    wait_until(lambda: client.state == KazooState.CONNECTED, 10, what="reconnected")
    outcome = wait_until(lambda: _resolve(claims, mine), 10, what="resolved")
    assert isinstance(outcome, Claimed) and outcome.record.nonce == mine.nonce
    again = claims.claim_late(mine)
    assert isinstance(again, Claimed) and again.fencing_token == outcome.fencing_token
    assert kazoo.get_children(paths.job_fires("j")) == ["2026-01-01T00:00:00Z", mine.scheduled]


def test_a_withdrawal_deletes_only_a_bare_claim_and_a_lost_reply_is_settled_by_retrying(
    zk_client: Callable[..., KazooClient],
    kazoo: KazooClient,
    proxy_to: Callable[..., FaultProxy],
    client_id: str,
) -> None:
    """A claim of ours that never started is withdrawn (its record deleted) only while it
    is the bare claim: a record with a result is left as it is, and one already gone is
    fine. A withdrawal whose reply was lost raises; sent again, it finds the node gone."""
    proxy = proxy_to()
    client = zk_client(proxy.address, session_timeout=4.0)
    paths = ClusterPaths(client_id)
    claims = FireClaims(client, paths, 1.0)
    bare = claims.claim(record("j", "2026-01-01T00:00:00Z", "n-1"))
    done = claims.claim(record("j", "2026-01-01T00:00:01Z", "n-2"))
    assert isinstance(bare, Claimed) and isinstance(done, Claimed)
    claims.complete(done, done.record.with_changes(state="ok"))
    assert not claims.withdraw(done)  # it has a result: kept
    assert kazoo.exists(done.path)
    proxy.set_mode(DROP_REPLIES)
    with pytest.raises((KazooException, KazooTimeoutError)):
        claims.withdraw(bare)
    assert not kazoo.exists(bare.path)  # it did apply
    proxy.set_mode(PASS)
    wait_until(lambda: client.state == KazooState.CONNECTED, 10, what="reconnected")
    assert wait_until(lambda: _withdraw(claims, bare), 10, what="withdrawn") == "gone"
    # the instant may be claimed afresh, with a larger fencing token
    again = claims.claim(record("j", "2026-01-01T00:00:00Z", "n-3"))
    assert isinstance(again, Claimed) and again.fencing_token > done.fencing_token


def _withdraw(claims: FireClaims, claimed: Claimed) -> str | None:
    try:
        return "deleted" if claims.withdraw(claimed) else "gone"
    except (KazooException, KazooTimeoutError):
        return None


def test_a_late_attempt_note_never_hides_the_result(kazoo: KazooClient, client_id: str) -> None:
    """A retried fire's notes go over the version the previous one left: a note that lands
    after the final result (a slow thread, a reply lost and the write retried) is refused,
    and so is one for a record that is gone (`jobs delete`)."""
    claims = FireClaims(kazoo, ClusterPaths(client_id), 5.0)
    claimed = claims.claim(record("j", "2026-01-01T00:00:00Z", "n-1"))
    assert isinstance(claimed, Claimed)
    first = claimed.record.with_changes(attempt=2, attempts=[{"attempt": 1, "state": "failed"}])
    assert claims.note_attempt(claimed, first, 0)
    claims.complete(claimed, claimed.record.with_changes(state="ok", attempt=2))
    assert not claims.note_attempt(claimed, first, 0)  # late: over the result
    assert not claims.note_attempt(claimed, first, 1)
    stored = claims.read("j", "2026-01-01T00:00:00Z")
    assert stored is not None and stored.state == "ok"
    kazoo.delete(claimed.path)
    assert not claims.note_attempt(claimed, first, 2)


def test_a_result_for_a_record_that_is_gone_is_refused_and_makes_nothing(
    kazoo: KazooClient, client_id: str
) -> None:
    """`complete` writes over whatever the record holds, but never makes one: a record
    gone with its job's history (`jobs delete`) stays gone, and the caller is told."""
    paths = ClusterPaths(client_id)
    claims = FireClaims(kazoo, paths, 5.0)
    claimed = claims.claim(record("j", "2026-01-01T00:00:00Z", "n-1"))
    assert isinstance(claimed, Claimed)
    assert claims.complete(claimed, claimed.record.with_changes(state="ok"))
    kazoo.delete(paths.job_fires("j"), recursive=True)
    assert not claims.complete(claimed, claimed.record.with_changes(state="failed"))
    assert kazoo.exists(paths.job_fires("j")) is None


@pytest.mark.parametrize(
    "horizon",
    [
        b"garbage",
        b'{"pruned_through": "zzz"}',
        b'{"pruned_through": "8999-01-01T00:00:00Z"}',
        b"",  # blanked: data that was written, now empty
    ],
)
def test_a_horizon_somebody_else_wrote_refuses_only_what_pruning_could_have_taken(
    kazoo: KazooClient, client_id: str, horizon: bytes
) -> None:
    """A fire folder's horizon that is no instant of the past refused every late claim for
    ever (at-least-once jobs never started, catch-ups and app claims were lost), and pruning
    never replaced it. Whatever pruning deleted before it was written is older than that
    write: instants after it (and the clocks' margin) are claimed; the next prune stores
    that bound as a true horizon."""
    paths = ClusterPaths(client_id)
    claims = FireClaims(kazoo, paths, 3.0)
    start = time.time() - 30
    instants = [format_utc(datetime.fromtimestamp(start + i, UTC)) for i in range(5)]
    for i, instant in enumerate(instants):
        claims.claim(record("j", instant, f"n{i}"))
    kazoo.set(paths.job_fires("j"), b'{"pruned_through": "2000-01-01T00:00:00Z"}')
    kazoo.set(paths.job_fires("j"), horizon)
    written = kazoo.exists(paths.job_fires("j")).mtime / 1000
    bound = format_utc(datetime.fromtimestamp(written + 5, UTC))
    assert claims.pruned_through("j") == bound
    behind = claims.claim_late(record("j", instants[2], "again", member="m-2"))
    assert isinstance(behind, AlreadyClaimed) and behind.pruned
    after = format_utc(datetime.fromtimestamp(written + 7, UTC))
    assert isinstance(claims.claim_late(record("j", after, "late")), Claimed)
    assert claims.prune("j", instants[:2])
    stored = json.loads(kazoo.get(paths.job_fires("j"))[0])
    assert stored == {"pruned_through": bound}  # a true horizon again, and no lower


def test_pruning_and_deleting_get_past_nodes_that_are_no_records(
    kazoo: KazooClient, client_id: str
) -> None:
    """A node with children of its own under a fire folder made every prune fail (the
    oldest record could not be deleted) and `jobs delete` leave the history behind; names
    that are no instant are no history."""
    paths = ClusterPaths(client_id)
    claims = FireClaims(kazoo, paths, 3.0)
    instants = [f"2026-01-01T00:00:0{i}Z" for i in range(1, 5)]
    for i, instant in enumerate(instants):
        claims.claim(record("j", instant, f"n{i}"))
    kazoo.create(paths.fire("j", "2026-01-01T00:00:00Z") + "/child", b"", makepath=True)
    kazoo.create(paths.fire("j", "zzz"), b"")
    assert claims.instants("j") == ["2026-01-01T00:00:00Z", *instants]
    assert claims.prune("j", ["2026-01-01T00:00:00Z", instants[0]])
    assert claims.instants("j") == instants[1:]
    claims.delete_job("j")
    assert not kazoo.exists(paths.job_fires("j"))
