"""A live member as its znode describes it (`Member`), read from the znode's record.

Anything read from ZooKeeper may be hostile: a record that is not a valid member record is
refused whole (`MemberRecordError`), and that member is left out of the owner table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from zksched.core.allowlist import command_allowed
from zksched.core.names import name_problem

MAX_FUNCTIONS = 2_000  # function jobs one app member may register (its record < 1 MB)


@dataclass(frozen=True)
class Member:
    """One live member of a cluster, as its znode describes it."""

    member_id: str
    host: str = ""
    pid: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    started_at: str = ""
    version: str = ""
    znode: str = ""
    allowed_commands: tuple[str, ...] | None = None  # None: every command is allowed
    # None: a daemon (runs command jobs). A mapping: an app member (zksched.Cluster) that
    # runs only the function jobs it registered: job name -> the spec's definition_hash
    functions: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        # Frozen and hashable all the way down: labels become a read-only view.
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        if self.allowed_commands is not None:
            object.__setattr__(self, "allowed_commands", tuple(self.allowed_commands))
        if self.functions is not None:
            object.__setattr__(self, "functions", MappingProxyType(dict(self.functions)))

    def __hash__(self) -> int:
        return hash((self.member_id, self.znode))

    def eligible_for(
        self,
        required: Mapping[str, str],
        program: str | None = None,
        env_names: frozenset[str] = frozenset(),
        function: tuple[str, str] | None = None,
    ) -> bool:
        """Labels include `required`; for a command job (`program`, its argv[0]), a daemon
        whose allow-list admits it run with a job env that sets `env_names`; for a function
        job (`function`: name, spec hash), an app member that registered it with that spec.
        Neither asked: by labels alone."""
        if not all(self.labels.get(key) == value for key, value in required.items()):
            return False
        if function is not None:
            return self.functions is not None and self.functions.get(function[0]) == function[1]
        if program is None:
            return True
        return self.functions is None and command_allowed(self.allowed_commands, program, env_names)

    def to_record(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "host": self.host,
            "pid": self.pid,
            "labels": dict(self.labels),
            "started_at": self.started_at,
            "version": self.version,
            "znode": self.znode,
            "allowed_commands": (
                list(self.allowed_commands) if self.allowed_commands is not None else None
            ),
            **({} if self.functions is None else {"functions": dict(self.functions)}),
        }


def sequence_of(znode: str) -> int:
    """The sequence number ZooKeeper appended to a sequential znode name (-1 if none)."""
    tail = znode.rsplit(".", 1)[-1]
    # ASCII only: str.isdigit() also admits digits such as "²" that int() refuses
    return int(tail) if tail.isascii() and tail.isdigit() else -1


class MemberRecordError(ValueError):
    """A member znode whose data is not a valid member record."""


def member_from_record(znode: str, data: object) -> Member:
    """Build a Member from a decoded member record; MemberRecordError says what is wrong."""
    if not isinstance(data, dict):
        raise MemberRecordError("member record is not a JSON object")
    member_id = data.get("member_id")
    if not isinstance(member_id, str) or not member_id:
        raise MemberRecordError("member record has no member_id")
    problem = name_problem(member_id, "member id")
    if problem is not None:
        raise MemberRecordError(problem)
    named, _, tail = znode.rpartition(".")  # a member's znode is `<member_id>.<sequence>`
    if sequence_of(znode) < 0 or len(tail) != 10:
        raise MemberRecordError(f"member znode {znode!r} does not end in a sequence number")
    if member_id != named:
        raise MemberRecordError(
            f"member record says member_id {member_id!r}, but its znode is named for {named!r}"
        )
    labels = data.get("labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise MemberRecordError("member record labels are not a string-to-string table")
    allowed = data.get("allowed_commands")
    if allowed is not None and (
        not isinstance(allowed, list) or not all(isinstance(p, str) for p in allowed)
    ):
        raise MemberRecordError("member record allowed_commands is not a list of strings")
    functions = _functions_of(data.get("functions"))
    pid = data.get("pid", 0)
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < 2**32:
        raise MemberRecordError("member record pid is not a process id")
    host, started_at, version = (data.get(k, "") for k in ("host", "started_at", "version"))
    if not all(isinstance(v, str) for v in (host, started_at, version)):
        raise MemberRecordError("member record host/started_at/version are not strings")
    texts = [host, started_at, version, *labels.keys(), *labels.values(), *(allowed or ())]
    if any(len(t) > 4096 or not t.isprintable() for t in texts):
        raise MemberRecordError("member record has control characters or overlong text")
    assert isinstance(host, str) and isinstance(started_at, str) and isinstance(version, str)
    return Member(
        member_id=member_id,
        host=host,
        pid=pid,
        labels=labels,
        started_at=started_at,
        version=version,
        znode=znode,
        allowed_commands=tuple(allowed) if allowed is not None else None,
        functions=functions,
    )


def _functions_of(value: object) -> dict[str, str] | None:
    """An app member's function jobs (job name -> spec hash), checked like everything read."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_FUNCTIONS:
        raise MemberRecordError(
            f"member record functions is not a table of at most {MAX_FUNCTIONS:,} jobs"
        )
    for name, digest in value.items():
        if name_problem(name, "job name") is not None or not (
            isinstance(digest, str) and len(digest) == 16 and digest.isalnum()
        ):
            raise MemberRecordError("member record functions has a bad job name or spec hash")
    return value
