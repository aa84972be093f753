"""Coordinator.claim behind the pruning horizon (zksched/app/coordination.py): a claim
whose record pruning would delete at once is refused, as docs/library.md says, and not only
once pruning (which goes in batches) has reached it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from zksched.app.coordination import Coordinator
from zksched.core.firekey import format_utc
from zksched.core.firerecord import FireRecord
from zksched.core.pruning import PRUNE_MIN_AGE, behind_history
from zksched.runtime.clock import iso_ms
from zksched.zk.claims import AlreadyClaimed, Claimed
from zksched.zk.paths import ClusterPaths

BASE = datetime(2026, 1, 2, 5, 0, tzinfo=UTC)


class ConnectedClient:
    """What the Coordinator reads of a kazoo client itself: state and session."""

    state = "CONNECTED"
    client_id = (7, b"")


class FakeClaims:
    """FireClaims over a dict: a create per instant, a stored horizon raised by prune()."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, FireRecord]] = {}
        self.horizon: dict[str, str] = {}
        self.created: list[str] = []

    def ensure_folder(self, job: str) -> None:
        self.records.setdefault(job, {})

    def instants(self, job: str) -> list[str]:
        return sorted(self.records.get(job, {}))

    def claim_late(self, record: FireRecord) -> Claimed | AlreadyClaimed:
        folder = self.records.setdefault(record.job, {})
        horizon = self.horizon.get(record.job)
        if horizon is not None and horizon >= record.scheduled:
            return AlreadyClaimed(None, pruned=True)
        if record.scheduled in folder:
            return AlreadyClaimed(folder[record.scheduled])
        folder[record.scheduled] = record
        self.created.append(record.scheduled)
        token = len(self.created)
        return Claimed(f"/{record.job}/{record.scheduled}", record, token)

    def complete(self, claimed: Claimed, record: FireRecord) -> bool:
        self.records[record.job][record.scheduled] = record
        return True

    def prune(self, job: str, victims: list[str]) -> bool:
        self.horizon[job] = max([self.horizon.get(job, ""), *victims])
        for instant in victims:
            self.records[job].pop(instant, None)
        return True


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self._now = now.timestamp()

    def now(self) -> float:
        return self._now

    def iso(self) -> str:
        return iso_ms(self._now)


def coordinator(now: datetime, history_of: int | None = None) -> tuple[Coordinator, FakeClaims]:
    made = Coordinator(
        ConnectedClient(),  # type: ignore[arg-type]
        ClusterPaths("c1"),
        "m1",
        clock=FixedClock(now),  # type: ignore[arg-type]
        history_of=None if history_of is None else (lambda _name: history_of),
    )
    claims = FakeClaims()
    made.claims = claims  # type: ignore[assignment]
    return made, claims


def test_a_claim_older_than_the_newest_20_records_is_refused_before_pruning_reaches_it() -> None:
    """The issue's steps: claims of 05:01…05:25, each finished ok, then a claim of 05:00.
    Pruning goes in batches (more than 5 records at a time), so nothing was pruned yet and
    05:00 used to be granted; its record was then pruned, and later claims of 05:00 refused."""
    app, claims = coordinator(BASE + timedelta(hours=1))
    for minute in range(1, 26):
        claim = app.claim("w1", BASE + timedelta(minutes=minute))
        assert claim is not None
        assert app.finish(claim, "ok")
    assert not claims.horizon, "nothing pruned yet: the refusal must not wait for it"
    assert app.claim("w1", BASE) is None
    assert format_utc(BASE) not in claims.created
    # 20 records are newer than 05:05:30 (05:06…05:25): behind; 05:06:30 has 19: granted
    assert app.claim("w1", BASE + timedelta(minutes=5, seconds=30)) is None
    assert app.claim("w1", BASE + timedelta(minutes=6, seconds=30)) is not None


def test_the_job_s_history_sets_the_horizon_of_its_name() -> None:
    app, _ = coordinator(BASE + timedelta(hours=1), history_of=60)
    for minute in range(1, 26):
        assert app.claim("reindex", BASE + timedelta(minutes=minute)) is not None
    assert app.claim("reindex", BASE) is not None  # 25 newer records, 60 kept


def test_young_records_are_never_behind_the_horizon() -> None:
    """Pruning keeps every record of the last minute (a member whose clock is behind must
    find it), so a claim there is not behind the horizon, however many are newer."""
    now = BASE + timedelta(minutes=10)
    app, _ = coordinator(now)
    for second in range(1, 31):
        assert app.claim("tick", now - timedelta(seconds=second)) is not None
    assert app.claim("tick", now - timedelta(seconds=45)) is not None


def test_behind_history_is_what_pruning_would_delete() -> None:
    now = (BASE + timedelta(hours=1)).timestamp()
    kept = [format_utc(BASE + timedelta(minutes=m)) for m in range(1, 4)]
    assert behind_history(kept, format_utc(BASE), 3, now, PRUNE_MIN_AGE)
    assert not behind_history(kept, format_utc(BASE), 4, now, PRUNE_MIN_AGE)
    assert not behind_history(kept, kept[0], 3, now, PRUNE_MIN_AGE)  # claimed already
    later = format_utc(BASE + timedelta(minutes=2, seconds=30))
    assert not behind_history(kept, later, 3, now, PRUNE_MIN_AGE)
