"""A member's fire core told only the jobs a membership change moved (`view_changed(...,
moved)`) does what it does when it looks at every job; and the job phase's table of moves."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from fire_shell import SESSION, T0, spec
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.fire import model as m
from zksched.core.fire.member import MemberFireCore, owns_nothing
from zksched.core.fire.stages import (
    PHASE_MOVES,
    IllegalTransition,
    JobPhase,
    check_phase_move,
)
from zksched.core.jobspec import JobSpec
from zksched.core.names import JobNames

JOBS = [f"job-{i}" for i in range(12)]
TABLE: dict[str, tuple[JobSpec, float]] = {
    name: (spec(name=name, overlap="allow" if i % 2 else "skip"), T0 - 3600)
    for i, name in enumerate(JOBS)
}


def core_owning(owned: set[str]) -> tuple[MemberFireCore, list[m.Action]]:
    core = MemberFireCore()
    out = core.table_changed(TABLE, T0)
    out += core.view_changed(SESSION, lambda name, _spec: name in owned, T0)
    return core, out


def real(actions: list[m.Action]) -> list[m.Action]:
    return sorted((a for a in actions if not isinstance(a, m.SetTimer)), key=repr)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from(JOBS)), st.sets(st.sampled_from(JOBS)), st.floats(0, 5))
def test_moved_jobs_alone_give_what_a_look_at_every_job_gives(
    before: set[str], after: set[str], later: float
) -> None:
    everything, _ = core_owning(before)
    delta, _ = core_owning(before)
    now = T0 + later
    owns_after = lambda name, _spec: name in after  # noqa: E731
    full = everything.view_changed(SESSION, owns_after, now)
    moved = before ^ after  # exactly the jobs whose owner changed, as OwnerTable says
    some = delta.view_changed(SESSION, owns_after, now, frozenset(moved))
    assert real(some) == real(full)
    assert delta.owned() == everything.owned() == sorted(after)


def test_a_new_session_looks_at_every_job_whatever_moved() -> None:
    core, _ = core_owning({"job-1"})
    out = core.view_changed(
        SESSION + 1, lambda name, _spec: name in {"job-1", "job-2"}, T0, frozenset()
    )
    assert core.owned() == ["job-1", "job-2"]
    assert any(
        isinstance(a, m.TakeLease | m.Claim | m.ReadHistory) and a.job == "job-2" for a in out
    )


@pytest.mark.parametrize(("old", "new"), list(itertools.product(JobPhase, JobPhase)))
def test_phase_moves(old: JobPhase, new: JobPhase) -> None:
    if old is new or (old, new) in PHASE_MOVES:
        assert check_phase_move(old, new) is new
    else:
        with pytest.raises(IllegalTransition):
            check_phase_move(old, new)


def test_deleted_is_final() -> None:
    assert not any(old is JobPhase.DELETED for old, _ in PHASE_MOVES)


def align_all(core: MemberFireCore, now: float, limit: int) -> tuple[list[m.Action], int]:
    out: list[m.Action] = []
    calls = 0
    while core.aligning:
        out += core.align(now, limit)
        calls += 1
    return out, calls


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.sampled_from(JOBS)),
    st.sets(st.sampled_from(JOBS)),
    st.sets(st.sampled_from(JOBS)),
    st.integers(1, 5),
    st.integers(0, 12),
    st.booleans(),
)
def test_aligning_a_slice_at_a_time_ends_where_aligning_at_once_does(
    before: set[str], middle: set[str], after: set[str], limit: int, first: int, derived: bool
) -> None:
    """A change aligned `limit` jobs a turn, and a newer view arriving after `first` of
    them: the same jobs owned, the same actions, as the newer view taken at once."""
    at_once, _ = core_owning(before)
    sliced, _ = core_owning(before)
    owns_after = lambda name, _spec: name in after  # noqa: E731
    full = at_once.view_changed(SESSION, owns_after, T0)
    out = sliced.view_changed(SESSION, lambda name, _spec: name in middle, T0, None, first)
    assert sliced.aligning == (first < len(JOBS))
    moved = frozenset(middle ^ after) if derived else None
    out += sliced.view_changed(SESSION, owns_after, T0, moved, limit)
    more, _ = align_all(sliced, T0, limit)
    out += more
    assert sliced.owned() == at_once.owned() == sorted(after)
    # every job the one look takes is taken by the slices too (they may also take, in the
    # middle view, a job that the newer one drops again)
    assert {a.job for a in full if isinstance(a, m.ReadHistory)} <= {
        a.job for a in out if isinstance(a, m.ReadHistory)
    }


def test_a_table_of_many_jobs_is_taken_a_slice_a_turn() -> None:
    core = MemberFireCore()
    core.view_changed(SESSION, lambda _name, _spec: True, T0)
    out = core.table_changed(TABLE, T0, limit=5)
    assert core.aligning
    assert len(core.owned()) == 5
    assert len({a.job for a in out if isinstance(a, m.ReadHistory)}) == 5
    more, calls = align_all(core, T0, 5)
    assert len({a.job for a in more if isinstance(a, m.ReadHistory)}) == 7
    assert calls == 2  # 5 + 5, then the last 2
    assert core.owned() == sorted(JOBS)
    assert not core.aligning


def test_a_stop_aligns_every_job_at_once_even_mid_slice() -> None:
    core = MemberFireCore()
    core.view_changed(SESSION, lambda _name, _spec: True, T0)
    core.table_changed(TABLE, T0)
    core.view_changed(SESSION, lambda _name, _spec: False, T0, None, 3)
    assert core.aligning
    core.stop(T0)
    assert not core.aligning
    assert core.owned() == []


def _busy_among_dormant() -> Any:
    """A member owning twenty dormant hourly jobs and, sorting after them, an every-five-
    seconds job that has fired and holds its lease between runs."""
    from test_fire_member_dormant import HORIZON, Driver

    jobs = {f"job-{i:02d}": spec(name=f"job-{i:02d}", schedule="0 0 * * * *") for i in range(20)}
    jobs["zz-busy"] = spec(name="zz-busy", schedule="*/5 * * * * *")
    driver = Driver(MemberFireCore(m.FireTunables(dormant_horizon=HORIZON)), now=T0 + 60)
    table = {name: (s, T0 + 30) for name, s in jobs.items()}
    driver.call(lambda now: driver.core.table_changed(table, now))
    driver.call(lambda now: driver.core.view_changed(SESSION, lambda _n, _s: True, now))
    driver.run_to(T0 + 69)  # fired at +65, ended at +68: the lease is kept while owned
    assert driver.core.dormant == 20 and driver.core.jobs["zz-busy"].in_hand
    return driver


def test_a_job_holding_its_lease_is_given_up_in_the_first_slice_whatever_its_name() -> None:
    """The member taking it over waits for that lease, not for the bulk of dormant jobs."""
    driver = _busy_among_dormant()
    core = driver.core
    names = frozenset(core.owned())
    first = core.view_changed(SESSION, lambda _n, _s: False, driver.now, names, 1)
    assert [a.job for a in first if isinstance(a, m.GiveBackLease)] == ["zz-busy"]
    assert core.aligning  # the twenty dormant ones are left for the next slices


def test_a_stop_forgets_dormant_jobs_at_once_and_gives_back_what_is_held() -> None:
    driver = _busy_among_dormant()
    core = driver.core
    out = core.stop(driver.now)
    assert core.dormant == 0 and core.owned() == [] and not core.aligning
    assert [a.job for a in out if isinstance(a, m.GiveBackLease)] == ["zz-busy"]


def test_moved_names_are_aligned_in_the_order_they_came_a_plain_set_sorted() -> None:
    """`JobNames` (what an owner table's change gives) in its own order, so that a member
    taking a million moved jobs does not sort them first; any other set sorted. Either way
    one order, whatever the hash seed: a run can be replayed."""
    came = ["job-7", "job-2", "job-11", "job-0"]
    for moved, first in ((JobNames(came), came[:2]), (frozenset(came), sorted(came)[:2])):
        core, _ = core_owning(set())
        core.view_changed(SESSION, lambda name, _spec: name in came, T0, moved, 2)
        assert core.owned() == sorted(first)  # the first two aligned, the others queued
        core.align(T0, None)
        assert core.owned() == sorted(came)


def state(core: MemberFireCore) -> tuple[object, ...]:
    return core.owned(), sorted(core.jobs), core.dormant, core.aligning


@settings(max_examples=100, deadline=None)
@given(st.sets(st.sampled_from(JOBS)), st.sets(st.sampled_from(JOBS)), st.integers(1, 12))
def test_owning_nothing_aligns_what_is_in_hand_alone_and_ends_where_a_look_at_every_job_does(
    before: set[str], changed: set[str], limit: int
) -> None:
    """Out of the view (`owns_nothing`), a job neither in hand nor owned has nothing to align:
    the core looks at what it holds alone, and ends where a look at every job ends."""
    looked, held = core_owning(before)[0], core_owning(before)[0]
    out_looked = looked.view_changed(SESSION, lambda _n, _s: False, T0 + 1, None, limit)
    out_held = held.view_changed(SESSION, owns_nothing, T0 + 1, None, limit)
    out_looked += align_all(looked, T0 + 1, limit)[0]
    out_held += align_all(held, T0 + 1, limit)[0]
    assert real(out_held) == real(out_looked)
    assert state(held) == state(looked)
    # a new table: some jobs changed, the rest deleted
    table = {n: (spec(name=n, schedule="*/2 * * * * *"), T0 + 2) for n in changed}
    out_looked = looked.table_changed(table, T0 + 2, limit) + align_all(looked, T0 + 2, limit)[0]
    out_held = held.table_changed(table, T0 + 2, limit) + align_all(held, T0 + 2, limit)[0]
    assert real(out_held) == real(out_looked)
    assert state(held) == state(looked)


def test_a_member_out_of_the_view_holding_nothing_sweeps_no_job_of_a_new_table() -> None:
    core = MemberFireCore()
    core.view_changed(SESSION, owns_nothing, T0)
    many = {f"job-{i}": (spec(name=f"job-{i}"), T0 - 3600) for i in range(10_000)}
    assert core.table_changed(many, T0, limit=10) == []
    assert not core.aligning  # a slice of ten a turn would be a thousand turns
    assert core.view_changed(SESSION, lambda _n, _s: False, T0, None, 10) == []
    assert core.aligning  # any other answer: every job looked at
