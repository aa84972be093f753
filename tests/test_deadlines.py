"""One thread for many deadlines (zksched/runtime/run/deadlines.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from zksched.runtime.run import deadlines as module
from zksched.runtime.run.deadlines import Deadlines


@pytest.fixture
def keeper() -> Iterator[Deadlines]:
    keeper = Deadlines("test-deadlines")
    yield keeper
    keeper.close()


def test_actions_run_at_their_time_in_order(keeper: Deadlines) -> None:
    ran: list[str] = []
    done = threading.Event()

    def late() -> None:
        ran.append("late")
        done.set()

    # added second but due first; the gap is wide enough that a descheduled test thread
    # (a loaded machine) cannot make "early" due later than "late"
    keeper.add(1.0, late)
    keeper.add(0.05, lambda: ran.append("early"))
    assert done.wait(10)
    assert ran == ["early", "late"]
    assert keeper.pending() == 0


def test_a_cancelled_action_never_runs(keeper: Deadlines) -> None:
    ran: list[str] = []
    done = threading.Event()
    key = keeper.add(0.05, lambda: ran.append("cancelled"))
    keeper.add(0.1, done.set)
    keeper.cancel(key)
    keeper.cancel(key)  # twice: harmless
    assert done.wait(5)
    assert ran == []


def test_one_thread_serves_every_deadline(keeper: Deadlines) -> None:
    before = threading.active_count()
    keys = [keeper.add(60, lambda: None) for _ in range(500)]
    assert threading.active_count() <= before + 1
    for key in keys:
        keeper.cancel(key)
    assert keeper.pending() == 0


def test_cancelled_entries_do_not_pile_up(keeper: Deadlines) -> None:
    for _ in range(10_000):  # runs that end long before their timeout
        keeper.cancel(keeper.add(3600, lambda: None))
    assert len(keeper._heap) <= 2 * module.COMPACT_ABOVE + 2


def test_an_action_that_raises_does_not_stop_the_others(
    keeper: Deadlines, caplog: pytest.LogCaptureFixture
) -> None:
    done = threading.Event()

    def broken() -> None:
        raise ValueError("boom")

    keeper.add(0.01, broken)
    keeper.add(0.05, done.set)
    assert done.wait(5)
    assert "a deadline's action failed" in caplog.text


def test_after_close_nothing_runs_and_adding_is_refused() -> None:
    keeper = Deadlines()
    ran: list[str] = []
    keeper.add(0.05, lambda: ran.append("after close"))
    keeper.close()
    threading.Event().wait(0.15)
    assert ran == []
    with pytest.raises(RuntimeError):
        keeper.add(1, lambda: None)
