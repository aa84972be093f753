"""At-least-once delivery's ZooKeeper layer against a real server (zk/redelivery.py): the
live marker goes with its session, an orphan is claimed again once (a larger token), a late
result of the dead claimer never hides the new run's, and a withdrawn claim-again leaves
the orphan as it was."""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient

from zksched.core.firerecord import FireRecord
from zksched.zk.claims import AlreadyClaimed, Claimed, FireClaims
from zksched.zk.paths import ClusterPaths
from zksched.zk.redelivery import Redelivery

INSTANT = "2026-01-01T00:00:00Z"


def record(nonce: str, member: str = "m-1", **changes: object) -> FireRecord:
    base = FireRecord(
        job="j",
        scheduled=INSTANT,
        member_id=member,
        session=1,
        nonce=nonce,
        state="running",
        claimed_at="2026-01-01T00:00:00.000Z",
    )
    return base.with_changes(**changes)


class Side:
    """One member's view: its client, claims and redelivery."""

    def __init__(self, client: KazooClient, client_id: str) -> None:
        self.client = client
        self.claims = FireClaims(client, ClusterPaths(client_id), 3.0)
        self.zk = Redelivery(client, ClusterPaths(client_id), self.claims, 3.0)

    def claim(self, nonce: str) -> Claimed:
        self.zk.ensure_folder("j")
        claimed = self.claims.claim_late(record(nonce), self.zk.marker(record(nonce)))
        assert isinstance(claimed, Claimed)
        return claimed


def test_an_orphan_is_the_claim_whose_session_ended(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    dying = Side(zk_client(zk), client_id)
    other = Side(zk_client(zk), client_id)
    dying.claim("a")
    assert other.zk.orphans("j", INSTANT) == []  # its claimer lives
    dying.client.stop()  # the session closes: its marker goes
    (orphan,) = other.zk.orphans("j", INSTANT)
    assert (orphan.record.nonce, orphan.version) == ("a", 0)


def test_an_orphan_is_claimed_again_once_with_a_larger_token(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    dying = Side(zk_client(zk), client_id)
    first = dying.claim("a")
    dying.client.stop()
    b, c = Side(zk_client(zk), client_id), Side(zk_client(zk), client_id)
    (orphan_b,) = b.zk.orphans("j", INSTANT)
    (orphan_c,) = c.zk.orphans("j", INSTANT)
    won = b.zk.claim(orphan_b, record("b", "m-2", attempt=2))
    lost = c.zk.claim(orphan_c, record("c", "m-3", attempt=2))
    assert isinstance(won, Claimed) and won.fencing_token > first.fencing_token
    assert isinstance(lost, AlreadyClaimed)
    assert lost.record is not None and lost.record.nonce == "b"
    assert c.zk.orphans("j", INSTANT) == []  # the new claim's marker lives
    # a lost reply is resolved by the nonce, with the claim-again's token
    found = b.claims.resolve(record("b", "m-2"))
    assert isinstance(found, Claimed) and found.fencing_token == won.fencing_token


def test_a_late_result_of_the_dead_claimer_never_hides_the_new_run(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    old = Side(zk_client(zk), client_id)
    claimed = old.claim("a")
    old.client.stop()
    new = Side(zk_client(zk), client_id)
    (orphan,) = new.zk.orphans("j", INSTANT)
    again = new.zk.claim(orphan, record("b", "m-2", attempt=2))
    assert isinstance(again, Claimed)
    # the old member comes back on a new session and writes what its run did
    back = Side(zk_client(zk), client_id)
    assert not back.zk.complete(claimed, claimed.record.with_changes(state="terminated"))
    assert new.zk.complete(again, again.record.with_changes(state="ok"))
    final = new.claims.read("j", INSTANT)
    assert final is not None and (final.state, final.nonce) == ("ok", "b")


def test_a_result_whose_marker_went_is_written_over_a_record_still_ours(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    """Our session ended after the claim, nobody claimed it again: the result stands."""
    old = Side(zk_client(zk), client_id)
    claimed = old.claim("a")
    old.client.stop()
    back = Side(zk_client(zk), client_id)
    assert back.zk.complete(claimed, claimed.record.with_changes(state="ok"))
    final = back.claims.read("j", INSTANT)
    assert final is not None and final.state == "ok"
    assert back.zk.orphans("j", INSTANT) == []


def test_a_result_deletes_the_marker_with_it(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    side = Side(zk_client(zk), client_id)
    claimed = side.claim("a")
    marker = side.zk.marker(claimed.record)
    assert side.client.exists(marker)
    assert side.zk.complete(claimed, claimed.record.with_changes(state="ok"))
    assert side.client.exists(marker) is None


def test_a_withdrawn_claim_again_leaves_the_orphan_as_it_was(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    old = Side(zk_client(zk), client_id)
    old.claim("a")
    old.client.stop()
    new = Side(zk_client(zk), client_id)
    (orphan,) = new.zk.orphans("j", INSTANT)
    again = new.zk.claim(orphan, record("b", "m-2", attempt=2))
    assert isinstance(again, Claimed)
    assert new.zk.withdraw(again)
    (still,) = new.zk.orphans("j", INSTANT)
    assert still.record.nonce == "b" and still.record.attempt == 2
    # a first claim withdrawn goes whole, marker and record
    fresh = Side(zk_client(zk), client_id)
    claimed = fresh.claims.claim_late(
        record("x").with_changes(scheduled="2026-01-01T00:00:01Z"),
        fresh.zk.marker(record("x").with_changes(scheduled="2026-01-01T00:00:01Z")),
    )
    assert isinstance(claimed, Claimed)
    assert fresh.zk.withdraw(claimed)
    assert fresh.claims.read("j", "2026-01-01T00:00:01Z") is None


def test_a_first_claim_withdrawn_after_its_session_ended_goes_without_its_marker(
    zk_client: Callable[..., KazooClient], zk: str, client_id: str
) -> None:
    """The claimer came back on a new session (contact was lost before the start): its
    marker went with the old session, so the withdrawal deletes the bare record alone."""
    old = Side(zk_client(zk), client_id)
    claimed = old.claim("a")
    old.client.stop()
    back = Side(zk_client(zk), client_id)
    assert back.zk.withdraw(claimed)
    assert back.claims.read("j", INSTANT) is None
    assert not back.zk.withdraw(claimed)  # gone already
