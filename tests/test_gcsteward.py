"""Full garbage collections at quiet moments (zksched/runtime/gcsteward.py)."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from zksched.runtime import gcsteward
from zksched.runtime.gcsteward import (
    FROZEN_GROWTH,
    MAX_INTERVAL,
    MIN_INTERVAL,
    NO_AUTOMATIC_FULL_PASS,
    PAUSE_SHARE,
    QUIET_AHEAD,
    TRIM_INTERVAL,
    GcSteward,
)


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_pass_is_due_when_quiet_after_the_minimum_or_always_after_the_maximum() -> None:
    now = [1000.0]
    steward = GcSteward(lambda ahead: True, clock=lambda: now[0])
    assert not steward.due(now[0] + MIN_INTERVAL - 1, quiet=True)
    assert steward.due(now[0] + MIN_INTERVAL, quiet=True)
    assert not steward.due(now[0] + MAX_INTERVAL - 1, quiet=False)  # busy: wait
    assert steward.due(now[0] + MAX_INTERVAL, quiet=False)  # but not for ever


def test_long_passes_come_seldom_enough_to_keep_their_share_of_the_time_small() -> None:
    now = [1000.0]
    steward = GcSteward(lambda ahead: True, clock=lambda: now[0])
    steward.last_pause = 0.4  # 100,000 jobs: a full pass holds everything this long
    spacing = 0.4 / PAUSE_SHARE
    assert spacing > MIN_INTERVAL
    assert not steward.due(now[0] + spacing - 1, quiet=True)
    assert steward.due(now[0] + spacing, quiet=True)
    steward.last_pause = 10.0  # however long: MAX_INTERVAL still bounds the wait
    assert steward.due(now[0] + MAX_INTERVAL, quiet=False)


def test_a_pass_frees_garbage_cycles_and_freezes_what_survives() -> None:
    steward = GcSteward(lambda ahead: True)
    garbage = Cycle()
    gone = weakref.ref(garbage)
    del garbage
    survivor = Cycle()
    try:
        steward.collect()
        assert gone() is None and steward.passes == 1
        assert gc.get_freeze_count() > 0  # survivors are out of the collector's sight
    finally:
        gc.unfreeze()
        del survivor


def test_giving_back_asks_glibc_to_keep_no_free_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def trim(pad: int) -> int:
        asked.append(pad)
        return 1

    monkeypatch.setattr(gcsteward, "_malloc_trim", lambda: trim)
    GcSteward(lambda ahead: True).give_back()
    assert asked == [0]  # keep no free memory at the heap's top


def test_without_glibc_a_pass_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcsteward, "_malloc_trim", lambda: None)
    steward = GcSteward(lambda ahead: True)
    steward.give_back()  # nothing to ask
    try:
        steward.collect()
    finally:
        gc.unfreeze()
    assert steward.passes == 1


def test_start_turns_automatic_full_passes_off_and_stop_restores_them() -> None:
    before = gc.get_threshold()
    checked = threading.Event()

    def quiet(ahead: float) -> bool:
        checked.set()
        raise RuntimeError("a question that fails counts as not quiet")

    steward = GcSteward(quiet, check_every=0.01)
    # as if the last pass were long ago: the steward asks whether it is quiet
    steward._last -= MIN_INTERVAL
    steward.start()
    try:
        assert gc.get_threshold() == (before[0], before[1], NO_AUTOMATIC_FULL_PASS)
        assert checked.wait(5)
        assert steward.passes == 0  # not quiet (the question failed): no pass yet
    finally:
        steward.stop()
        gc.unfreeze()
    assert gc.get_threshold() == before


def test_a_pass_needs_two_quiet_looks_in_a_row() -> None:
    """A gap between two batches of a burst looks quiet once: no pass in it."""
    answers = [True, False, True, False, True]  # never quiet twice in a row
    calls = [0]
    go = threading.Event()
    sixth = threading.Event()

    def quiet(ahead: float) -> bool:
        calls[0] += 1
        if calls[0] <= len(answers):
            return answers[calls[0] - 1]
        sixth.set()
        go.wait(5)  # the test looks at the count before the sixth answer comes
        return True  # quiet right after quiet: a pass is due

    steward = GcSteward(quiet, check_every=0.01)
    steward._last -= MIN_INTERVAL
    steward.start()
    try:
        assert sixth.wait(5)
        assert steward.passes == 0
        go.set()
        for _ in range(500):
            if steward.passes:
                break
            threading.Event().wait(0.01)
        assert steward.passes == 1
    finally:
        go.set()
        steward.stop()
        gc.unfreeze()


def test_the_quiet_horizon_grows_with_the_last_pause() -> None:
    """A pass must end before the next fire: the steward asks for a quiet stretch of at
    least QUIET_AHEAD seconds, or three times its last pause if that is longer."""
    asked: list[float] = []
    looked = threading.Event()

    def quiet(ahead: float) -> bool:
        asked.append(ahead)
        looked.set()
        return False

    steward = GcSteward(quiet, check_every=0.01)
    steward._last -= 100  # past the spacing of both pauses below, short of MAX_INTERVAL
    steward.last_pause = 0.05  # a small job table: the fixed horizon
    steward.start()
    try:
        assert looked.wait(5)
        assert asked[-1] == QUIET_AHEAD
        steward.last_pause = 0.8  # a pass that took 0.8 s wants 2.4 s of quiet
        for _ in range(500):  # the next look after the change asks for it
            if asked[-1] != QUIET_AHEAD:
                break
            threading.Event().wait(0.01)
        assert asked[-1] == 3 * 0.8
    finally:
        steward.stop()


def test_a_pass_gives_nothing_back_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free heap goes back on the trims' own clock (TRIM_INTERVAL), not with each pass."""
    asked: list[int] = []
    monkeypatch.setattr(gcsteward, "_malloc_trim", lambda: asked.append)
    try:
        GcSteward(lambda ahead: True).collect()
    finally:
        gc.unfreeze()
    assert asked == []


def test_the_quiet_question_waits_for_the_spacing() -> None:
    """The question looks at every job (a million, on a large member): it is not asked
    while no pass could follow anyway."""
    asked = threading.Event()

    def quiet(ahead: float) -> bool:
        asked.set()
        return False

    steward = GcSteward(quiet, check_every=0.01)
    steward.last_pause = 1.0  # spacing: 1.0 / PAUSE_SHARE
    steward._last -= MIN_INTERVAL  # past the minimum, short of the spacing
    steward.start()
    try:
        assert not asked.wait(0.3)
        steward._last -= 1.0 / PAUSE_SHARE
        assert asked.wait(5)
    finally:
        steward.stop()


def test_a_pass_forced_by_time_leaves_the_frozen_alone_until_they_grew() -> None:
    """A member that is never quiet: its forced passes collect what is new and do not walk
    the frozen (a million jobs' worth: seconds), unless those grew by FROZEN_GROWTH."""
    steward = GcSteward(lambda ahead: False)
    try:
        steward.collect()  # quiet pass: the baseline of frozen objects
        frozen_cycle = Cycle()
        steward.collect()
        frozen_gone = weakref.ref(frozen_cycle)
        del frozen_cycle  # garbage now, but frozen
        young = Cycle()
        young_gone = weakref.ref(young)
        del young
        assert not steward.frozen_grew()
        steward.collect(unfreeze=False)
        assert young_gone() is None  # what was made since the last freeze: collected
        assert frozen_gone() is not None  # the frozen: not walked
        kept = [Cycle() for _ in range(int(gc.get_freeze_count() * FROZEN_GROWTH) + 10)]
        steward.collect(unfreeze=False)  # they survive: frozen
        assert steward.frozen_grew()
        steward.collect(unfreeze=steward.frozen_grew())
        assert frozen_gone() is None and not steward.frozen_grew()
        del kept
    finally:
        gc.unfreeze()


def test_free_heap_goes_back_between_passes_busy_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replaced job table's free heap goes back within TRIM_INTERVAL, not at the next full
    pass (at a million jobs a minute or two away; never on a member that is never quiet)."""
    trims: list[int] = []
    monkeypatch.setattr(gcsteward, "_malloc_trim", lambda: trims.append)
    now = [1000.0]
    steward = GcSteward(lambda ahead: False, clock=lambda: now[0], check_every=0.01)
    steward.start()
    try:
        threading.Event().wait(0.2)
        assert trims == []  # not before TRIM_INTERVAL
        for expected in ([0], [0, 0]):
            now[0] += TRIM_INTERVAL
            for _ in range(500):
                if len(trims) == len(expected):
                    break
                threading.Event().wait(0.01)
            threading.Event().wait(0.1)
            assert trims == expected  # once a TRIM_INTERVAL
        assert steward.passes == 0
    finally:
        steward.stop()
