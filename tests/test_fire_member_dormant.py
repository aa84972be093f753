"""Dormant jobs (owned, no machine until their next fire comes near) change nothing a member
does: a core with `dormant_horizon` and one without, given the same table, views, triggers
and answers, make the same claims, starts, lease takes, records and skips at the same
moments. Only their timers differ."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from fire_shell import SESSION, T0, spec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zksched.core.fire import model as m
from zksched.core.fire.member import MemberFireCore
from zksched.core.jobspec import JobSpec

HORIZON = 30.0  # above lease_lead (10 s), far below the hourly job's period
RUN = 3.0  # how long each started command runs
SLICE = 1  # jobs aligned a step: a change reaches the jobs one by one
SCHEDULES = (
    "*/5 * * * * *",  # never dormant: always due within the horizon
    "0 * * * * *",
    "30 */2 * * * *",
    "0 0 * * * *",
    "0 7 12 * * *",
)


def table_of(specs: dict[str, JobSpec], updated_at: float) -> dict[str, tuple[JobSpec, float]]:
    return {name: (s, updated_at) for name, s in specs.items()}


@dataclass
class Driver:
    """One member's core, driven as the engine drives it: timers, and every request
    answered at the next step as a healthy ZooKeeper and a quick command would."""

    core: MemberFireCore
    now: float = T0
    timers: dict[str, float] = field(default_factory=dict)
    heap: list[tuple[float, str]] = field(default_factory=list)
    answers: list[tuple[float, int, str, Any]] = field(default_factory=list)
    seen: list[tuple[float, object]] = field(default_factory=list)
    tokens: int = 0
    order: int = 0

    def _answer(self, at: float, job: str, event: Any) -> None:
        self.order += 1
        heapq.heappush(self.answers, (at, self.order, job, event))

    def take(self, actions: list[m.Action]) -> None:
        for action in actions:
            if isinstance(action, m.SetTimer):
                self.timers[action.job] = action.at
                heapq.heappush(self.heap, (action.at, action.job))
                continue
            self.seen.append((self.now, _comparable(action)))
            match action:
                case m.ReadHistory(job):
                    self._answer(self.now, job, m.HistoryRead())
                case m.FindOrphans(job):
                    self._answer(self.now, job, m.OrphansFound())
                case m.ReadRanges(job):
                    self._answer(self.now, job, m.RangesRead())
                case m.TakeLease(job, _wait, take):
                    self._answer(self.now, job, m.LeaseAnswered(m.LeaseOutcome.TAKEN, take))
                case m.Claim(job, instant):
                    self.tokens += 1
                    created = m.ClaimAnswered(instant, m.ClaimOutcome.CREATED, self.tokens)
                    self._answer(self.now, job, created)
                case m.Start(job, instant):
                    self._answer(self.now, job, m.Started(instant))
                    self._answer(self.now + RUN, job, m.Exited(instant, "ok"))
                case m.Terminate(job, instant):
                    self._answer(self.now, job, m.Exited(instant, "terminated"))
                case m.WriteResult(job, instant):
                    self._answer(self.now, job, m.ResultWritten(instant))

    def call(self, step: Callable[[float], list[m.Action]]) -> None:
        self.take(step(self.now))

    def run_to(self, until: float) -> None:
        """Deliver what is due up to `until`, a second at a time (as a busy engine would),
        aligning one job a second while a change is being aligned (as the engine does, a
        slice a turn)."""
        while self.now < until:
            self.now = min(until, self.now + 1.0)
            if self.core.aligning:
                self.take(self.core.align(self.now, SLICE))
            for _ in range(50):  # answers may bring more answers at the same moment
                moved = False
                while self.answers and self.answers[0][0] <= self.now:
                    _, _, job, event = heapq.heappop(self.answers)
                    self.take(self.core.handle(job, event, self.now))
                    moved = True
                while self.heap and self.heap[0][0] <= self.now:
                    at, job = heapq.heappop(self.heap)
                    if self.timers.get(job) == at:
                        del self.timers[job]
                        self.take(self.core.handle(job, m.Tick(), self.now))
                        moved = True
                wake = self.core.next_wake  # the one timer of every dormant job
                if wake is not None and wake <= self.now:
                    self.take(self.core.wake_due(self.now))
                    moved = True
                if not moved:
                    break

    def actions_at(self) -> dict[float, list[str]]:
        out: dict[float, list[str]] = {}
        for at, action in self.seen:
            out.setdefault(at, []).append(repr(action))
        return {at: sorted(actions) for at, actions in out.items()}


def _comparable(action: m.Action) -> object:
    """An action without its lease take id or fencing token (both count in the order the
    member's timers fire: the same takes and claims, numbered otherwise)."""
    if isinstance(action, m.Start):
        return replace(action, token=0)
    if isinstance(action, m.TakeLease):
        return replace(action, take=0)
    if isinstance(action, m.GiveBackLease):
        return replace(action, take=0)
    return action


Op = tuple[str, int, int]  # (what, job index, value)

ops = st.lists(
    st.tuples(
        st.sampled_from(("own", "respec", "pause", "delete", "trigger", "reconnect", "wait")),
        st.integers(0, 5),
        st.integers(0, 1 << 12),
    ),
    max_size=14,
)


def _jobs(seed: int) -> dict[str, JobSpec]:
    out = {}
    for i in range(6):
        kind = (seed >> (2 * i)) & 3
        out[f"job-{i}"] = spec(
            name=f"job-{i}",
            schedule=SCHEDULES[(seed + i) % len(SCHEDULES)],
            overlap="allow" if kind == 1 else "skip",
            catchup="all" if kind == 2 else "latest",
            jitter=(7.0, 45.0)[i % 2] if kind == 3 else 0.0,  # 45: above the horizon
            catchup_window=600.0,
        )
    return out


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 1 << 12), ops, st.floats(0, 3600))
# jobs in hand are aligned first in name order, not in the order their machines were made
# (which differs between the two cores)
@example(245, [("own", 0, 1087), ("own", 0, 0), ("own", 0, 1087), ("own", 2, 226)], 1627.2)
def test_a_dormant_core_does_what_a_core_with_every_machine_does(
    seed: int, script: list[Op], start: float
) -> None:
    specs = _jobs(seed)
    # changed just before (nothing to catch up: far jobs are dormant) or two hours before
    updated = T0 + start - (7200 if seed % 3 == 0 else 1)
    cores = [
        Driver(MemberFireCore(m.FireTunables(dormant_horizon=HORIZON)), now=T0 + start),
        Driver(MemberFireCore(m.FireTunables(dormant_horizon=0)), now=T0 + start),
    ]
    owned = {name for i, name in enumerate(specs) if seed & (1 << i)}
    session = SESSION
    table = table_of(specs, updated)

    def everywhere(step: Callable[[MemberFireCore, float], list[m.Action]]) -> None:
        for d in cores:
            d.call(lambda now, core=d.core: step(core, now))

    everywhere(lambda c, now: c.table_changed(table, now))
    everywhere(lambda c, now: c.view_changed(session, lambda n, _s: n in owned, now))
    limit = SLICE if seed % 2 else None  # changes aligned at once, or a job a step
    for what, index, value in script:
        name = f"job-{index}"
        for d in cores:
            d.run_to(d.now + value % 400)
        if what == "own":
            owned ^= {name}
            now_owned = frozenset(owned)
            everywhere(
                lambda c, now, o=now_owned, s=session: c.view_changed(
                    s, lambda n, _s: n in o, now, None, limit
                )
            )
        elif what in ("respec", "pause", "delete") and name in table:
            table = dict(table)
            if what == "delete":
                del table[name]
            else:
                old = table[name][0]
                changed = (
                    replace(old, paused=not old.paused)
                    if what == "pause"
                    else replace(old, schedule=SCHEDULES[value % len(SCHEDULES)])
                )
                table[name] = (changed, cores[0].now)
            snapshot = table
            everywhere(lambda c, now, t=snapshot: c.table_changed(t, now, limit))
        elif what == "trigger" and name in owned:
            everywhere(lambda c, now, n=name, v=value: c.handle(n, m.Triggered(f"t{v}"), now))
        elif what == "reconnect":
            everywhere(lambda c, now: c.view_changed(None, lambda n, _s: False, now))
            for d in cores:
                d.run_to(d.now + value % 200)  # disconnected for up to 200 s
            session += 1
            now_owned = frozenset(owned)
            everywhere(
                lambda c, now, o=now_owned, s=session: c.view_changed(
                    s, lambda n, _s: n in o, now, None, limit
                )
            )
    for d in cores:
        d.run_to(d.now + 900)
    dormant, every = cores
    assert dormant.actions_at() == every.actions_at()
    assert dormant.core.owned() == every.core.owned()


def owning_an_hourly_job() -> Driver:
    """A member at T0 + 60 s that owns an hourly job changed at T0 + 30 s: dormant until
    the horizon before the next hour."""
    hourly = spec(name="hourly", schedule="0 0 * * * *")
    driver = Driver(MemberFireCore(m.FireTunables(dormant_horizon=HORIZON)), now=T0 + 60)
    driver.call(lambda now: driver.core.table_changed({"hourly": (hourly, T0 + 30)}, now))
    driver.call(lambda now: driver.core.view_changed(SESSION, lambda _n, _s: True, now))
    return driver


def test_far_jobs_are_dormant_and_wake_before_their_fire() -> None:
    driver = owning_an_hourly_job()
    core = driver.core
    assert core.owned() == ["hourly"] and core.jobs == {} and core.dormant == 1
    next_hour = datetime.fromtimestamp(T0, UTC).replace(minute=0).timestamp() + 3600
    assert driver.core.next_wake == next_hour - HORIZON
    driver.run_to(next_hour - HORIZON)
    assert "hourly" in core.jobs and core.dormant == 0  # woken: takes the lease ahead
    driver.run_to(next_hour + 1)
    starts = [a for _, a in driver.seen if isinstance(a, m.Start)]
    assert [s.instant.timestamp() for s in starts] == [next_hour]  # type: ignore[attr-defined]


def test_a_trigger_wakes_a_dormant_job() -> None:
    driver = owning_an_hourly_job()
    core = driver.core
    driver.call(lambda now: core.handle("hourly", m.Triggered("manual"), now))
    driver.run_to(T0 + 62)
    assert any(isinstance(a, m.Start) and a.kind == "trigger" for _, a in driver.seen)


def test_at_least_once_jobs_and_jobs_with_a_catch_up_keep_their_machine() -> None:
    hourly = spec(name="a", schedule="0 0 * * * *", delivery="at-least-once")
    missed = spec(name="b", schedule="0 0 * * * *")  # its last instant is after its change
    core = MemberFireCore(m.FireTunables(dormant_horizon=HORIZON))
    table = {"a": (hourly, T0 - 7200), "b": (missed, T0 - 600)}
    core.table_changed(table, T0 + 60)
    out = core.view_changed(SESSION, lambda _n, _s: True, T0 + 60)
    assert sorted(core.jobs) == ["a", "b"] and core.dormant == 0
    assert any(isinstance(a, m.ReadHistory) and a.job == "b" for a in out)


def test_a_dormant_job_that_moves_away_or_is_deleted_is_no_longer_owned() -> None:
    hourly = spec(name="hourly", schedule="0 0 * * * *")
    core = MemberFireCore(m.FireTunables(dormant_horizon=HORIZON))
    core.table_changed({"hourly": (hourly, T0 + 30)}, T0 + 60)
    core.view_changed(SESSION, lambda _n, _s: True, T0 + 60)
    core.view_changed(SESSION, lambda _n, _s: False, T0 + 61, frozenset({"hourly"}))
    assert core.owned() == [] and core.dormant == 0
    core.view_changed(SESSION, lambda _n, _s: True, T0 + 62, frozenset({"hourly"}))
    assert core.owned() == ["hourly"]
    core.table_changed({}, T0 + 63)
    assert core.owned() == [] and core.jobs == {}
    # a timer set while it was dormant finds nothing to wake
    assert core.handle("hourly", m.Tick(), T0 + 3600) == []


def test_a_change_to_a_dormant_job_is_taken_at_once_not_when_the_slices_reach_it() -> None:
    hourly = spec(name="b", schedule="0 0 * * * *")
    often = spec(name="b", schedule="0 */2 * * * *")
    other = spec(name="a", schedule="0 0 * * * *")
    core = MemberFireCore(m.FireTunables(dormant_horizon=HORIZON))
    driver = Driver(core, now=T0 + 60)
    table = {"a": (other, T0 + 30), "b": (hourly, T0 + 30)}
    driver.call(lambda now: core.table_changed(table, now))
    driver.call(lambda now: core.view_changed(SESSION, lambda _n, _s: True, now))
    assert core.dormant == 2
    changed = {"a": (other, T0 + 30), "b": (often, T0 + 100)}
    driver.now = T0 + 100
    driver.take(core.table_changed(changed, driver.now, limit=0))  # no slice aligned yet
    assert "b" in core.jobs  # its machine, planned from its change
    driver.run_to(T0 + 125)
    starts = [a for _, a in driver.seen if isinstance(a, m.Start)]
    assert [(s.instant.timestamp(), s.kind) for s in starts] == [(T0 + 120, "scheduled")]  # type: ignore[attr-defined]


def test_a_deleted_dormant_job_is_forgotten_at_once() -> None:
    hourly = spec(name="b", schedule="0 0 * * * *")
    core = MemberFireCore(m.FireTunables(dormant_horizon=HORIZON))
    core.table_changed({"b": (hourly, T0 + 30)}, T0 + 60)
    core.view_changed(SESSION, lambda _n, _s: True, T0 + 60)
    core.table_changed({}, T0 + 61, limit=0)
    assert core.owned() == [] and core.dormant == 0


def test_a_job_whose_jitter_reaches_the_horizon_keeps_its_machine() -> None:
    jittery = spec(name="j", schedule="0 0 * * * *", jitter=HORIZON)
    core = MemberFireCore(m.FireTunables(dormant_horizon=HORIZON))
    core.table_changed({"j": (jittery, T0 + 30)}, T0 + 60)
    core.view_changed(SESSION, lambda _n, _s: True, T0 + 60)
    assert list(core.jobs) == ["j"] and core.dormant == 0


def test_the_horizon_is_above_the_lease_lead() -> None:
    with pytest.raises(ValueError, match="dormant_horizon"):
        m.FireTunables(dormant_horizon=5.0, lease_lead=10.0)
    assert m.FireTunables(dormant_horizon=0).dormant_horizon == 0


def test_a_machine_with_nothing_in_hand_goes_back_to_sleep_after_its_fire() -> None:
    driver = owning_an_hourly_job()
    core = driver.core
    next_hour = T0 + 3600
    driver.run_to(next_hour + RUN + 2)  # woken, fired, its result written
    assert core.jobs == {} and core.dormant == 1  # asleep until the hour after
    assert driver.core.next_wake == next_hour + 3600 - HORIZON
    driver.run_to(next_hour + 3600 + 1)
    starts = [a.instant.timestamp() for _, a in driver.seen if isinstance(a, m.Start)]  # type: ignore[attr-defined]
    assert starts == [next_hour, next_hour + 3600]
    assert not any(isinstance(a, m.ReadHistory) for _, a in driver.seen)  # nothing re-planned
