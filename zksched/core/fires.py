"""Fire records: what the cluster remembers of each (job, scheduled instant).

A record is created once per fire (the claim) and then completed with the result. Its
states:

    running     claimed and the command started (or about to)
    ok | failed | timeout | terminated | error   the command's result
    skipped     due but deliberately not run; `skip_reason` says why

A record left `running` by a member whose ZooKeeper session is gone is shown as
`abandoned`: it is derived when reading, never written, and never run again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

FireState = Literal["running", "ok", "failed", "timeout", "terminated", "error", "skipped"]
FINAL_STATES = frozenset({"ok", "failed", "timeout", "terminated", "error", "skipped"})

SKIP_REASONS = (
    "not-connected",
    "already-claimed",
    "still-running",
    "paused",
    "claim-error",
    "outside-catchup-window",
)


@dataclass(frozen=True)
class FireRecord:
    job: str
    scheduled: str  # UTC instant, "2026-01-02T02:00:00Z"
    member_id: str
    session: int
    nonce: str  # identifies the claim attempt: a create whose reply was lost is recognised
    state: FireState
    claimed_at: str
    kind: Literal["scheduled", "catchup", "trigger"] = "scheduled"
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    error: str | None = None
    skip_reason: str | None = None
    fencing_token: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fire_key(self) -> str:
        return f"{self.job}@{self.scheduled}"

    def to_json(self) -> bytes:
        # Written twice per fire: the fields are read directly (dataclasses.asdict deep-copies).
        data = {
            name: value
            for name in _FIELD_NAMES
            if (value := getattr(self, name)) is not None and value != {}
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> FireRecord:
        """Parse a stored record; ValueError when it is not one."""
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("fire record is not a JSON object")
        known = {f for f in cls.__dataclass_fields__}
        required = ("job", "scheduled", "member_id", "session", "nonce", "state", "claimed_at")
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"fire record lacks {', '.join(missing)}")
        # Hand-written or corrupt JSON must fail here, not later in a reader (an unhashable
        # session made shown_state raise in `jobs list` and `jobs history`).
        wrong = [k for k in required if k != "session" and not isinstance(data[k], str)]
        if type(data["session"]) is not int:
            wrong.append("session")
        if not isinstance(data.get("extra", {}), dict):
            wrong.append("extra")
        if wrong:
            raise ValueError(f"fire record has wrong types for {', '.join(wrong)}")
        return cls(**{k: v for k, v in data.items() if k in known})

    def finished(self, **changes: Any) -> FireRecord:
        return replace(self, **changes)

    def shown_state(self, live_sessions: set[int]) -> str:
        """The state to show: `abandoned` for a run whose member's session is gone."""
        if self.state == "running" and self.session not in live_sessions:
            return "abandoned"
        return self.state


_FIELD_NAMES = tuple(f.name for f in fields(FireRecord))
