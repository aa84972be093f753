"""What is wrong with a job file or record: each problem (job, field, line), and the error.

Parsing collects every problem instead of stopping at the first; a value check raises
`_Bad` with the reason alone, and the caller adds which job and field it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

_LineOf = Callable[..., int | None]  # (*path) -> the line of that table or key


def _show(text: str, limit: int = 60) -> str:
    """A user string for a one-line message: quoted, escaped, shortened."""
    shown = repr(text[:limit])
    return shown if len(text) <= limit else shown[:-1] + "...'"


@dataclass
class SpecProblem:
    """One thing wrong with a job file or record: which job, which field, why, where."""

    job: str | None
    field: str | None
    message: str
    line: int | None = None
    source: str | None = None

    def __str__(self) -> str:
        if self.source is not None:
            where = f"{self.source}:{self.line}: " if self.line else f"{self.source}: "
        else:
            where = f"line {self.line}: " if self.line else ""
        parts = []
        if self.job is not None:
            parts.append(f"job {_show(self.job)}")
        if self.field is not None:
            parts.append(f"field {_show(self.field)}")
        subject = ", ".join(parts)
        return f"{where}{subject}: {self.message}" if subject else f"{where}{self.message}"


class JobSpecError(ValueError):
    """A job file or record is invalid; `.problems` lists every problem found."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = problems
        if len(problems) == 1:
            text = str(problems[0])
        else:
            text = f"{len(problems)} problems: " + "; ".join(str(p) for p in problems)
        super().__init__(text)


class _Bad(Exception):
    """A value is wrong; the message says why (without naming the job or field)."""
