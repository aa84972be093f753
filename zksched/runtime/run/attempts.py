"""The earlier attempts of fires that are retried (`retries = N`), until their result: the
runs' results as the fire record's fields (the fire shell writes them).

Each failed attempt's result is kept here (the fire's record notes it at once, and its
final record lists them all); the last attempt's result is the fire's result.
"""

from __future__ import annotations

import threading
from typing import Any

from zksched.core.firekey import FireId
from zksched.core.firerecord import FireRecord
from zksched.runtime.clock import iso_ms
from zksched.runtime.run.request import RunResult


def result_fields(result: RunResult) -> dict[str, Any]:
    """A run's result as fire record fields."""
    return {
        "state": result.status,
        "started_at": iso_ms(result.started_at),
        "finished_at": iso_ms(result.finished_at),
        "exit_code": result.exit_code,
        "error": result.error,
    }


class AttemptLog:
    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._earlier: dict[FireId, list[dict[str, Any]]] = {}

    def failed(
        self, fire: FireId, attempt: int, result: RunResult | None, status: str, retry_at: float
    ) -> list[dict[str, Any]]:
        """Attempt `attempt` of `fire` ended (`result`; None if its result is not known
        here): kept. Returns every earlier attempt so far, oldest first."""
        entry: dict[str, Any] = {"attempt": attempt}
        if result is not None:
            entry.update((k, v) for k, v in result_fields(result).items() if v is not None)
        entry.update(state=status, retry_at=iso_ms(retry_at))
        with self._mutex:
            earlier = self._earlier.setdefault(fire, [])
            earlier.append(entry)
            return list(earlier)

    def final(
        self, fire: FireId, result: RunResult | None, status: str, error: str | None
    ) -> dict[str, Any]:
        """The record fields of `fire`'s result (`status`, as the core says): its last
        run's `result`; without one, the last failed attempt's when the fire gave up waiting
        for its next attempt, else `status` and `error` (an attempt that could not start).
        With the earlier attempts when there were any; {}: nothing to add."""
        with self._mutex:
            earlier = self._earlier.pop(fire, [])
        if result is not None:
            fields = result_fields(result)
        elif earlier and earlier[-1]["state"] == status:
            last = earlier.pop()
            fields = {k: last.get(k) for k in _RESULT_KEYS}
        elif earlier:
            fields = {"state": status, "error": error}
        else:
            return {}
        if earlier:
            fields["attempt"] = len(earlier) + 1
            fields["attempts"] = earlier
        return fields


_RESULT_KEYS = ("state", "started_at", "finished_at", "exit_code", "error")


def after_claim(fields: dict[str, Any], claimed: FireRecord) -> dict[str, Any]:
    """`final`'s fields as the record of a claim that began at a later attempt (an orphan
    claimed again, at-least-once): its record's attempts come first, and the attempt
    numbers count on from its own."""
    if not claimed.attempts or "attempts" not in fields:
        return fields
    first = claimed.attempt or 1
    return fields | {
        "attempts": [*claimed.attempts, *fields["attempts"]],
        "attempt": fields["attempt"] + first - 1,
    }
