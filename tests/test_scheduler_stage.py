"""The timer's stage (zksched/runtime/scheduler.py): instants leave the heap 0.25 s early,
their claims are drafted meanwhile, and they are handed on when due, never before.

A real FireScheduler on the real clock with a fake fire path (no ZooKeeper): every-second
jobs over a few seconds. Bounds are loose (the machine is shared): what is asserted is
order and content, not speed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from zksched.core.jobspec import JobSpec
from zksched.core.jobtable import JobEntry
from zksched.core.owners import Member, OwnerTable
from zksched.runtime.clock import Clock
from zksched.runtime.cluster import ClusterView
from zksched.runtime.jobs import JobsSnapshot
from zksched.runtime.scheduler import STAGE_AHEAD, FireScheduler

pytestmark = pytest.mark.timeout(60)

JOBS = ("a", "b", "c")


class _Leases:
    def set_owned(self, owned: object) -> None:
        pass

    def has_leftovers(self) -> bool:
        return False

    def release_unowned(self) -> None:
        pass

    def ready(self, job: str, session: int) -> bool:
        return True


class _Claims:
    def instants(self, job: str) -> list[str]:
        return []


class FakeFirePath:
    """Records what the scheduler hands on, and when."""

    def __init__(self, draft_seconds: float = 0.0) -> None:
        self.leases = _Leases()
        self.claims = _Claims()
        self.draft_seconds = draft_seconds
        self.lock = threading.Lock()
        # (handed on at, [(job, instant, paused)], the drafts it got)
        self.batches: list[tuple[float, list[tuple[str, datetime, bool]], object]] = []
        self.drafted: list[tuple[float, datetime]] = []  # (drafted at, instant)
        self.lone: list[tuple[float, str, datetime]] = []  # (handed on at, job, instant)

    def draft(self, due: list[tuple[JobSpec, datetime, float]]) -> object:
        with self.lock:
            self.drafted.append((time.time(), due[0][1]))
        time.sleep(self.draft_seconds)
        return ("drafts", due[0][1])

    def fire_many(self, due: list[tuple[JobSpec, datetime, float]], drafts: object) -> list[Any]:
        with self.lock:
            self.batches.append((time.time(), [(s.name, i, s.paused) for s, i, _ in due], drafts))
        return []

    def fire(self, spec: JobSpec, instant: datetime, kind: str, *args: object) -> str:
        """A fire on its own: here, an instant that came while its job's catch-up ran."""
        with self.lock:
            self.lone.append((time.time(), spec.name, instant))
        return "started"

    def has_pending(self) -> bool:
        return False

    def wait_idle(self, timeout: float) -> bool:
        return True

    def terminate_all(self, why: str) -> None:
        pass

    def remember_history(self, job: str, instants: list[str]) -> None:
        pass

    def record_skip_range(self, *args: object) -> None:
        pass


class _Skips:
    def skip(self, *args: object, **kwargs: object) -> None:
        pass


def snapshot(generation: int, paused: tuple[str, ...] = ()) -> JobsSnapshot:
    entries = {
        name: JobEntry(
            name,
            JobSpec(
                name=name,
                schedule="* * * * * *",
                command=("true",),
                overlap="allow",
                catchup="none",
                paused=name in paused,
            ),
            None,
            "2020-01-01T00:00:00Z",
        )
        for name in JOBS
    }
    return JobsSnapshot(generation, entries)


def run_scheduler(fire_path: FakeFirePath) -> Iterator[FireScheduler]:
    scheduler = FireScheduler(fire_path, _Skips(), Clock(), concurrency=4)  # type: ignore[arg-type]
    member = Member("m-1", znode="/zksched/t/members/m-1.0000000001")
    scheduler.update_view(ClusterView(True, 1, "m-1", member.znode, OwnerTable([member])))
    scheduler.update_jobs(snapshot(1))
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.stop(1)


@pytest.fixture
def fire_path() -> FakeFirePath:
    return FakeFirePath()


@pytest.fixture
def scheduler(fire_path: FakeFirePath) -> Iterator[FireScheduler]:
    yield from run_scheduler(fire_path)


def wait_for_fraction(low: float, high: float) -> None:
    """Until the clock is between `low` and `high` past a whole second."""
    while not low < time.time() % 1.0 < high:
        time.sleep(0.002)


def test_instants_are_handed_on_when_due_with_their_drafts(
    fire_path: FakeFirePath, scheduler: FireScheduler
) -> None:
    time.sleep(3.2)
    with fire_path.lock:
        batches, drafted = list(fire_path.batches), list(fire_path.drafted)
        lone = list(fire_path.lone)
    assert len(batches) >= 2
    for handed_at, _, instant in lone:
        assert handed_at >= instant.timestamp(), "never before the instant"
    # the first instant may come while the jobs' catch-up runs: those of its fires go on their
    # own once it is over, and the batch has neither all of them nor drafts
    for handed_at, fires, drafts in batches[1:]:
        instant = fires[0][1]
        assert handed_at >= instant.timestamp(), "never before the instant"
        assert sorted(name for name, _, _ in fires) == list(JOBS)
        assert {i for _, i, _ in fires} == {instant}
        assert drafts == ("drafts", instant)  # drafted while staged, handed on with it
    assert batches[0][0] >= batches[0][1][0][1].timestamp()
    for drafted_at, instant in drafted:
        assert drafted_at < instant.timestamp()
        assert drafted_at >= instant.timestamp() - STAGE_AHEAD - 0.05


def test_a_job_paused_while_its_instant_is_staged_goes_with_its_new_spec(
    fire_path: FakeFirePath, scheduler: FireScheduler
) -> None:
    time.sleep(1.2)
    wait_for_fraction(0.85, 0.9)  # the next instant is staged, its claims drafted
    paused_at = time.time()
    scheduler.update_jobs(snapshot(2, paused=("b",)))
    time.sleep(2.2)
    with fire_path.lock:
        after = [fires for t, fires, _ in fire_path.batches if t > paused_at]
    assert after
    for fires in after:
        paused = {name: p for name, _, p in fires}
        # b is handed on with the spec that says paused (the fire path skips it), never
        # with the spec it was staged with; the others are not held back
        assert paused == {"a": False, "b": True, "c": False}


def test_drafts_not_ready_in_time_are_not_waited_for() -> None:
    slow = FakeFirePath(draft_seconds=0.6)
    for _ in run_scheduler(slow):
        time.sleep(3.2)
    with slow.lock:
        batches = list(slow.batches)
    assert len(batches) >= 2
    for handed_at, fires, drafts in batches:
        instant = fires[0][1].timestamp()
        assert instant <= handed_at < instant + 0.5, "a slow draft did not hold the fire up"
        assert drafts is None


def test_a_stop_leaves_nothing_staged_to_fire(
    fire_path: FakeFirePath, scheduler: FireScheduler
) -> None:
    time.sleep(1.1)
    wait_for_fraction(0.85, 0.9)
    scheduler.stop_dispatching()
    stopped = time.time()
    time.sleep(1.5)
    with fire_path.lock:
        assert [t for t, _, _ in fire_path.batches if t > stopped] == []
    assert scheduler.next_due() is None


class _SlowLeases(_Leases):
    """Give-back passes that take long (ZooKeeper slow, or cut off unnoticed)."""

    def __init__(self) -> None:
        self.passes = 0
        self.release = threading.Event()

    def release_unowned(self) -> None:
        self.passes += 1
        self.release.wait(10)


def test_give_back_passes_asked_for_during_a_slow_one_do_not_pile_up() -> None:
    """Passes are asked for on every ownership change and every few seconds: while one is
    slow, the ones asked for meanwhile are one pass, run after it (it sees every change
    made before it starts), not a queue as long as the asking went on."""
    fire_path = FakeFirePath()
    slow = _SlowLeases()
    fire_path.leases = slow
    scheduler = FireScheduler(fire_path, _Skips(), Clock(), concurrency=4)  # type: ignore[arg-type]
    try:
        scheduler._submit_give_back()
        deadline = time.monotonic() + 5
        while slow.passes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slow.passes == 1  # running, and slow
        for _ in range(100):
            scheduler._submit_give_back()
        slow.release.set()
        deadline = time.monotonic() + 5
        while slow.passes < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert slow.passes == 2  # the hundred requests made one more pass
        scheduler._submit_give_back()  # a change after that pass began: a pass of its own
        deadline = time.monotonic() + 5
        while slow.passes < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slow.passes == 3
    finally:
        slow.release.set()
        scheduler.stop(1)
