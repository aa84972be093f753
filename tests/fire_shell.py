"""Drives one fire core (`JobFireMachine`) the way the shell does, for the fire core's tests."""

from __future__ import annotations

from datetime import UTC, datetime

from zksched.core.fire import model as m
from zksched.core.fire.job import JobFireMachine
from zksched.core.jobspec import JobSpec

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp()
SESSION = 7


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


def spec(**changes: object) -> JobSpec:
    values: dict[str, object] = {
        "name": "job",
        "schedule": "* * * * * *",
        "command": ("true",),
        "overlap": "skip",
        "catchup": "latest",
        "catchup_window": 60.0,
    }
    values.update(changes)
    return JobSpec(**values)  # type: ignore[arg-type]


class Shell:
    """Drives one machine: time, the core's actions, and answers to them."""

    def __init__(self, job: JobSpec, updated_at: float = T0 - 3600, **tunables: object) -> None:
        self.machine = JobFireMachine(job, updated_at, m.FireTunables(**tunables))  # type: ignore[arg-type]
        self.now = T0 - 0.5
        self.actions: list[m.Action] = []

    def feed(self, actions: list[m.Action]) -> list[m.Action]:
        real = [a for a in actions if not isinstance(a, m.SetTimer)]
        self.actions += real
        return real

    def join(self) -> list[m.Action]:
        out = self.feed(self.machine.set_session(SESSION, self.now))
        return out + self.feed(self.machine.set_owned(True, self.now))

    def to(self, seconds: float) -> list[m.Action]:
        self.now = T0 + seconds
        return self.feed(self.machine.handle(m.Tick(), self.now))

    def give(self, event: m.JobEvent) -> list[m.Action]:
        return self.feed(self.machine.handle(event, self.now))

    def lease(
        self, outcome: m.LeaseOutcome, holder: str | None = None, running: bool = True
    ) -> list[m.Action]:
        """Answer the newest lease take."""
        return self.give(m.LeaseAnswered(outcome, self.last_take(), holder, running))

    def last_take(self) -> int:
        return [a for a in self.actions if isinstance(a, m.TakeLease)][-1].take

    def of(self, kind: type) -> list[m.Action]:
        return [a for a in self.actions if isinstance(a, kind)]

    def skips(self, reason: m.SkipReason) -> list[datetime]:
        return [a.instant for a in self.of(m.Skip) if a.reason is reason]  # type: ignore[attr-defined]

    def run(self, instant: datetime, token: int = 1) -> None:
        """Answer the claim of `instant` as ours, and its command starts."""
        self.give(m.ClaimAnswered(instant, m.ClaimOutcome.CREATED, token))
        self.give(m.Started(instant))

    def finish(self, instant: datetime, status: str = "ok") -> None:
        self.give(m.Exited(instant, status))
        self.give(m.ResultWritten(instant))


def claims(actions: list[m.Action]) -> list[datetime]:
    return [a.instant for a in actions if isinstance(a, m.Claim)]
