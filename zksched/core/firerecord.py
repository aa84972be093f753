"""Fire records: what the cluster remembers of each (job, scheduled instant).

A record is created once per fire (the claim) and then completed with the result. Its
states:

    running     claimed and the command started (or about to)
    ok | failed | timeout | terminated | error   the command's result
    skipped     due but deliberately not run; `skip_reason` says why

With retries (`retries = N`) a failed run is run again under the same record: `attempt` is
the attempt running (or the one whose result the record holds), `attempts` the earlier
attempts' results.

A record left `running` by a member whose ZooKeeper session is gone is shown as
`abandoned`: its member died after the claim and before it could record a result. Whether
the command had started is not known (if it had, the member's reaper stopped it with the
member, runtime/run/reaper.py). It is derived when reading, never written, and never run again
(at most once: running it again could run twice a command that had started) unless the
job's `delivery` is at-least-once: then its owner claims it again (zk/redelivery.py), and
`attempts` keeps the abandoned attempt as `{"state": "abandoned", ...}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from zksched.core.znodedata import load_object

FireState = Literal["running", "ok", "failed", "timeout", "terminated", "error", "skipped"]
FINAL_STATES = frozenset({"ok", "failed", "timeout", "terminated", "error", "skipped"})

MAX_RECORD_BYTES = 256 * 1024  # a record is well under 1 KiB (its attempts: a few more)

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
    attempt: int | None = None  # retries: the attempt running or that gave the result (>1)
    attempts: list[dict[str, Any]] | None = None  # retries: the earlier attempts, oldest first
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
        data = load_object(raw, "fire record", MAX_RECORD_BYTES)
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
        if data.get("kind", "scheduled") not in ("scheduled", "catchup", "trigger"):
            wrong.append("kind")
        if "attempt" in data and not (
            type(data["attempt"]) is int and 1 <= data["attempt"] < 2**31
        ):
            wrong.append("attempt")  # attempts count from 1 (a negative one broke retries)
        attempts = data.get("attempts", [])
        if not (isinstance(attempts, list) and all(isinstance(a, dict) for a in attempts)):
            wrong.append("attempts")
        if wrong:
            raise ValueError(f"fire record has wrong types or ranges for {', '.join(wrong)}")
        return cls(**{k: v for k, v in data.items() if k in known})

    def with_changes(self, **changes: Any) -> FireRecord:
        """A copy with these fields changed (TypeError for a name that is no field). A
        burst's fire path copies every record a few times: `dataclasses.replace` calls
        `__init__` by keyword (~9 µs here), this copies the instance dict (~2 µs)."""
        if not changes.keys() <= _FIELD_SET:
            raise TypeError(f"not fields of a fire record: {sorted(changes.keys() - _FIELD_SET)}")
        copy = object.__new__(FireRecord)
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(changes)
        return copy

    def shown_state(self, live_sessions: set[int]) -> str:
        """The state to show: `abandoned` for a run whose member's session is gone."""
        if self.state == "running" and self.session not in live_sessions:
            return "abandoned"
        return self.state


_FIELD_NAMES = tuple(f.name for f in fields(FireRecord))
_FIELD_SET = frozenset(_FIELD_NAMES)

_CLAIMED_AT_FIRST = b'{"claimed_at":'  # to_json sorts the keys: claimed_at comes first


@dataclass(frozen=True)
class ClaimDraft:
    """A claim record made before its instant, complete but for when it is sent
    (`claimed_at`), and already encoded: a burst's claims can leave the moment they are
    due, without hundreds of records to build and encode first. Made by `ClaimDraft.of`."""

    record: FireRecord  # claimed_at is ""
    _after_claimed_at: bytes  # the record's JSON after its claimed_at member

    @classmethod
    def of(cls, record: FireRecord) -> ClaimDraft:
        blank = record.with_changes(claimed_at="")
        encoded = blank.to_json()
        head = _CLAIMED_AT_FIRST + b'"",'
        if not encoded.startswith(head):  # a field added that sorts before claimed_at
            raise ValueError("claimed_at is not the first member of a fire record's JSON")
        return cls(blank, encoded[len(head) :])

    def sent_at(self, claimed_at: str) -> tuple[FireRecord, bytes]:
        """The record as it is claimed at `claimed_at`, and its JSON (as `to_json` makes it)."""
        value = json.dumps(claimed_at).encode()
        return (
            self.record.with_changes(claimed_at=claimed_at),
            _CLAIMED_AT_FIRST + value + b"," + self._after_claimed_at,
        )
