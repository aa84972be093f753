"""The production fire core, watched: `TracedCore` is the `MemberFireCore` a simulated
member's engine runs, telling the ledger and the trace what goes in and comes out.

What the checker needs of the member's own view comes from here: when a claim was sent and
when its reply came back created (the at-most-once window opens), when a withdrawal was
done, which triggers were taken and handed back; and what started each fire (its kind),
for the process table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from zksched.core.fire import model as m
from zksched.core.fire.member import MemberFireCore, Owns
from zksched.core.firekey import format_utc
from zksched.core.jobspec import JobSpec

if TYPE_CHECKING:
    from sim.member.base import MemberBase


class TracedCore(MemberFireCore):
    def __init__(self, tunables: m.FireTunables, member: MemberBase) -> None:
        super().__init__(tunables)
        self._member = member
        self.kinds: dict[tuple[str, datetime], m.FireKind] = {}  # of the fires started
        self.skipped: dict[str, int] = {}

    def table_changed(
        self, table: Mapping[str, tuple[JobSpec, float]], now: float, limit: int | None = None
    ) -> list[m.Action]:
        return self._out(super().table_changed(table, now, limit))

    def view_changed(
        self,
        session: int | None,
        owns: Owns,
        now: float,
        moved: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[m.Action]:
        return self._out(super().view_changed(session, owns, now, moved, limit))

    def align(self, now: float, limit: int | None) -> list[m.Action]:
        return self._out(super().align(now, limit))

    def session_lost(self, now: float) -> list[m.Action]:
        return self._out(super().session_lost(now))

    def stop(self, now: float) -> list[m.Action]:
        return self._out(super().stop(now))

    def handle(self, job: str, event: m.JobEvent, now: float) -> list[m.Action]:
        member = self._member
        world, ledger = member.world, member.ledger
        if world.tracing and not isinstance(event, m.Tick):
            world.note(member.name, f"{job} <- {event}")
        match event:
            case m.ClaimAnswered(instant, m.ClaimOutcome.CREATED):
                ledger.claimed(job, instant, member.name, world.t)
                member.claim_landed()
            case m.Withdrawn(instant, True):
                ledger.withdrawn(job, instant)
            case m.Triggered(node):
                ledger.trigger_taken(node, member)
        return self._out(super().handle(job, event, now))

    def _out(self, actions: list[m.Action]) -> list[m.Action]:
        member = self._member
        world, ledger = member.world, member.ledger
        for action in actions:
            ledger.count(action)
            match action:
                case m.Claim(job, instant):
                    ledger.claim_sent[(job, instant)] = world.t
                case m.Start(job, instant, kind):
                    self.kinds[(job, instant)] = kind
                case m.ReturnTrigger(_, trigger):
                    ledger.trigger_returned(trigger)
                case m.Skip(job, instant, reason, detail, count):
                    self.skipped[reason.value] = self.skipped.get(reason.value, 0) + count
                    key = f"{job}@{format_utc(instant)}"
                    world.note(member.name, f"skip {key} {reason.value} {detail}")
                    continue
                case m.Warn(job, event, text):
                    world.note(member.name, f"warn {job} {event}: {text}")
                    continue
            if world.tracing:
                world.note(member.name, f"-> {action}")
        return actions
