"""The dormant jobs' one timer (zksched/core/fire/dormancy.py) against a plain model: a dict
of name -> wake, whose due names are those with a wake at or before now."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.fire.dormancy import DormantJobs

NAMES = [f"job-{i}" for i in range(6)]
Op = tuple[str, str, int]
ops = st.lists(
    st.tuples(
        st.sampled_from(["sleep", "discard", "due"]), st.sampled_from(NAMES), st.integers(0, 9)
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_due_names_are_the_sleeping_ones_whose_wake_has_come(script: list[Op]) -> None:
    jobs, model = DormantJobs(), {}
    woken: set[str] = set()  # due and not put to sleep since: not due again
    for what, name, t in script:
        if what == "sleep":
            jobs.sleep(name, float(t))
            model[name] = float(t)
            woken.discard(name)
        elif what == "discard":
            jobs.discard(name)
            model.pop(name, None)
        else:
            due = jobs.due(float(t))
            expected = {n for n, w in model.items() if w <= t and n not in woken}
            assert sorted(due) == sorted(expected)  # each once
            woken |= expected
        assert len(jobs) == len(model) and set(jobs) == set(model)
        assert all(jobs.get(n) == w for n, w in model.items())
        waiting = [w for n, w in model.items() if n not in woken]
        if waiting:  # the one timer comes no later than the earliest waiting wake
            assert jobs.next_wake is not None and jobs.next_wake <= min(waiting)


def test_jobs_of_one_wake_share_one_timer_and_come_in_the_order_they_slept() -> None:
    jobs = DormantJobs()
    for name in ["c", "a", "b"]:
        jobs.sleep(name, 60.0)
    jobs.sleep("later", 120.0)
    assert jobs.next_wake == 60.0
    assert jobs.due(59.0) == []
    assert jobs.due(60.0) == ["c", "a", "b"]
    assert jobs.next_wake == 120.0


def test_churn_does_not_grow_the_groups_without_bound() -> None:
    """Jobs dropped and taken again each change (a rolling deploy) while their wake is a
    year away: stale names are regrouped away, not kept until the wake."""
    jobs = DormantJobs()
    for change in range(200):
        for i in range(100):
            jobs.discard(f"job-{i}")
            jobs.sleep(f"job-{i}", 1e9 + change)
    assert len(jobs) == 100
    assert jobs._entries <= 2 * len(jobs) + 1024
    assert jobs.due(1e9 + 199) == [f"job-{i}" for i in range(100)]
