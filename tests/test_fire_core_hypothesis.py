"""One job's fire machine against an adversarial shell (hypothesis): any answer to any
pending action, in any order, with the clock, the connection, ownership and the spec
changing in between. The machine must never make an illegal move, and its starts must obey
the rules whatever happens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from zksched.core.fire import model as m
from zksched.core.fire.job import JobFireMachine
from zksched.core.fire.stages import COMMAND_UP, FireStage, LeaseStage
from zksched.core.jobspec import JobSpec

T0 = 1_772_366_400.0  # 2026-03-01T12:00:00Z
_MOVING = {
    FireStage.STARTING: lambda i: m.Started(i),
    FireStage.RUNNING: lambda i: m.Exited(i, "ok"),
    FireStage.WRITING: lambda i: m.ResultWritten(i),
}


def job(**changes: object) -> JobSpec:
    values: dict[str, object] = {"name": "j", "schedule": "* * * * * *", "command": ("true",)}
    values.update(changes)
    return JobSpec(**values)  # type: ignore[arg-type]


class AdversarialShell(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.machine = JobFireMachine(job(), T0 - 30, m.FireTunables())
        self.claims: list[datetime] = []  # claims and resolves waiting for an answer
        self.created: set[datetime] = set()  # answered CREATED (last answer)
        self.started: list[datetime] = []
        self.running: set[datetime] = set()
        self.withdraws: list[datetime] = []  # withdrawals waiting for an answer
        self.takes: list[int] = []  # lease takes waiting for an answer (stale ones too)
        self.held: set[int] = set()  # takes whose lock the shell holds for the machine
        self.reads: list[type] = []
        self.token = 100
        self.apply(self.machine.set_session(1, self.now))
        self.apply(self.machine.set_owned(True, self.now))

    def apply(self, actions: list[m.Action]) -> None:
        for action in actions:
            match action:
                case m.Claim(_, instant) | m.Resolve(_, instant):
                    self.claims.append(instant)
                case m.Withdraw(_, instant):
                    assert instant in self.created, "withdrew what is not a claim of ours"
                    assert instant not in self.started, "withdrew a claim whose run started"
                    self.withdraws.append(instant)
                case m.TakeLease(_, _, take):
                    self.takes.append(take)
                case m.GiveBackLease(_, take):
                    assert take in self.held, "gave back a lock the shell does not hold"
                    self.held.discard(take)
                case m.ReadHistory():
                    self.reads.append(m.HistoryRead)
                case m.ReadRanges():
                    self.reads.append(m.RangesRead)
                case m.FindOrphans():
                    self.reads.append(m.OrphansFound)
                case m.Start(_, instant, kind):
                    assert instant in self.created, "started without a claim of ours"
                    assert kind == "trigger" or not self.machine.spec.paused, "started paused"
                    assert self.machine.session is not None, "started while not connected"
                    if self.machine.spec.overlap == "skip":
                        assert self.machine.lease is LeaseStage.HELD, "started without the lease"
                        others = [
                            f
                            for f in self.machine.fires.values()
                            if f.instant != instant and f.stage in COMMAND_UP
                        ]
                        assert not others, "started beside another run"
                    self.started.append(instant)
                case _:
                    pass

    @rule(seconds=st.floats(0.01, 3.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.apply(self.machine.handle(m.Tick(), self.now))

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), outcome=st.sampled_from(list(m.ClaimOutcome)))
    def answer_a_claim(self, data: st.DataObject, outcome: m.ClaimOutcome) -> None:
        instant = self.claims.pop(data.draw(st.integers(0, len(self.claims) - 1)))
        fire = self.machine.fires.get(instant)
        if fire is None or fire.stage.value not in ("claiming", "resolving"):
            return
        if outcome is m.ClaimOutcome.ABSENT and fire.stage.value == "claiming":
            outcome = m.ClaimOutcome.UNKNOWN
        self.token += 1
        if outcome is m.ClaimOutcome.CREATED and instant in self.created:
            outcome = m.ClaimOutcome.TAKEN  # ZooKeeper creates a path once
        if outcome is m.ClaimOutcome.CREATED:
            self.created.add(instant)
        self.apply(self.machine.handle(m.ClaimAnswered(instant, outcome, self.token), self.now))

    @precondition(lambda self: self.withdraws)
    @rule(data=st.data(), done=st.booleans())
    def answer_a_withdrawal(self, data: st.DataObject, done: bool) -> None:
        instant = self.withdraws.pop(data.draw(st.integers(0, len(self.withdraws) - 1)))
        if done:
            self.created.discard(instant)  # the record is gone: the path may be created again
        self.apply(self.machine.handle(m.Withdrawn(instant, done), self.now))

    @precondition(lambda self: self.takes)
    @rule(data=st.data(), outcome=st.sampled_from(list(m.LeaseOutcome)))
    def answer_a_lease_take(self, data: st.DataObject, outcome: m.LeaseOutcome) -> None:
        """Any take, the newest or one given up before (answers come late, in any order)."""
        take = self.takes.pop(data.draw(st.integers(0, len(self.takes) - 1)))
        if outcome is m.LeaseOutcome.TAKEN:
            self.held.add(take)
        self.apply(self.machine.handle(m.LeaseAnswered(outcome, take, "x"), self.now))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def a_held_lock_vanishes(self, data: st.DataObject) -> None:
        take = sorted(self.held)[data.draw(st.integers(0, len(self.held) - 1))]
        self.apply(self.machine.handle(m.LeaseGone(take), self.now))

    @precondition(lambda self: self.reads)
    @rule(ok=st.booleans(), data=st.data())
    def answer_a_read(self, ok: bool, data: st.DataObject) -> None:
        kind = self.reads.pop(0)
        if kind is m.RangesRead or not ok:
            self.apply(self.machine.handle(kind(ok=ok), self.now))
            return
        # orphans: seconds of the last half minute no claim of ours has been made for
        ago = data.draw(st.lists(st.integers(1, 30), max_size=3, unique=True))
        second = datetime.fromtimestamp(int(self.now), UTC)
        orphans = tuple(
            (instant, 1)
            for instant in sorted(second - timedelta(seconds=n) for n in ago)
            if instant not in self.created and instant not in self.started
        )
        self.apply(self.machine.handle(kind(orphans=orphans), self.now))

    @rule(data=st.data())
    def a_command_moves_on(self, data: st.DataObject) -> None:
        """A command starts, or one ends, or a result is written: which, drawn."""
        fires = [f for f in self.machine.fires.values() if f.stage in _MOVING]
        if not fires:
            return
        fire = fires[data.draw(st.integers(0, len(fires) - 1))]
        event = _MOVING[fire.stage](fire.instant)
        self.apply(self.machine.handle(event, self.now))

    @rule(connected=st.booleans())
    def the_connection_changes(self, connected: bool) -> None:
        self.apply(self.machine.set_session(1 if connected else None, self.now))

    @rule()
    def the_session_is_lost(self) -> None:
        self.held.clear()  # the shell gives the old session's locks up; takes may answer
        self.apply(self.machine.session_lost(self.now))
        self.apply(self.machine.set_session(1, self.now))

    @rule(owned=st.booleans())
    def ownership_changes(self, owned: bool) -> None:
        self.apply(self.machine.set_owned(owned, self.now))

    @rule(
        overlap=st.sampled_from(["skip", "allow"]),
        paused=st.booleans(),
        catchup=st.sampled_from(["all", "latest", "none"]),
        jitter=st.sampled_from([0.0, 1.5]),
        delivery=st.sampled_from(["at-most-once", "at-least-once"]),
    )
    def the_spec_changes(
        self, overlap: str, paused: bool, catchup: str, jitter: float, delivery: str
    ) -> None:
        new = job(overlap=overlap, paused=paused, catchup=catchup, jitter=jitter, delivery=delivery)
        self.apply(self.machine.set_spec(new, self.now, self.now))

    @rule()
    def a_trigger(self) -> None:
        self.apply(self.machine.handle(m.Triggered(f"t{self.now}"), self.now))

    @invariant()
    def each_instant_starts_once(self) -> None:
        assert len(self.started) == len(set(self.started))

    @invariant()
    def a_held_lease_is_a_lock_the_shell_holds(self) -> None:
        if self.machine.lease is LeaseStage.HELD:
            assert self.machine._take in self.held, "believes it holds a lock given back"


AdversarialShell.TestCase.settings = settings(
    max_examples=200, stateful_step_count=80, deadline=None
)
test_the_fire_machine_against_an_adversarial_shell = AdversarialShell.TestCase
