"""Helpers for fire-path tests: job files whose commands record their fire keys."""

from __future__ import annotations

import collections
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from integration.hang import hang_guard
from zksched.core.firekey import fire_key, parse_fire_key
from zksched.core.firerecord import FireRecord
from zksched.zk.paths import ClusterPaths


def recording_job(
    name: str, out: Path, schedule: str = "* * * * * *", program: str = "sh", **keys: object
) -> str:
    """TOML for a job whose command appends `<fire key> <member> <token> <start ts>` to `out`.

    Lines are short and written with O_APPEND by one `echo`, so concurrent writers never
    interleave (POSIX: writes up to PIPE_BUF are atomic on a pipe; appends of a few dozen
    bytes to a local file are too in practice, and each line is checked whole).
    """
    script = (
        'echo "$ZKSCHED_FIRE_KEY $ZKSCHED_MEMBER_ID $ZKSCHED_FENCING_TOKEN $(date +%s.%N)"'
        f" >> {out}"
    )
    command = f"command = ['{program}', '-c', '{script}']"
    lines = [f"[jobs.{name}]", f'schedule = "{schedule}"', command]
    for key, value in keys.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, int | float):
            lines.append(f"{key} = {value}")
        else:
            lines.append(f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


class FireLog:
    """What the commands themselves wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[list[str]]:
        if not self.path.exists():
            return []
        return [line.split() for line in self.path.read_text().splitlines() if line.strip()]

    def fire_keys(self) -> list[str]:
        return [parts[0] for parts in self.lines()]

    def counts(self) -> collections.Counter[str]:
        return collections.Counter(self.fire_keys())

    def duplicates(self) -> dict[str, int]:
        return {k: n for k, n in self.counts().items() if n > 1}

    def by_job(self) -> dict[str, list[datetime]]:
        out: dict[str, list[datetime]] = collections.defaultdict(list)
        for key in self.fire_keys():
            job, instant = parse_fire_key(key)
            out[job].append(instant)
        return out

    def started_early(self) -> list[str]:
        """Fire keys whose command started before their instant (by this host's clock)."""
        return [
            parts[0]
            for parts in self.lines()
            if float(parts[3]) < parse_fire_key(parts[0])[1].timestamp()
        ]

    def members_of(self, job: str) -> list[str]:
        return [p[1] for p in self.lines() if p[0].startswith(f"{job}@")]

    def tokens(self, job: str) -> list[tuple[datetime, int]]:
        return sorted(
            (parse_fire_key(p[0])[1], int(p[2])) for p in self.lines() if p[0].startswith(f"{job}@")
        )

    def wait_for(self, predicate: object, timeout: float) -> None:
        timeout = hang_guard(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if callable(predicate) and predicate():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s; log has {len(self.fire_keys())} fires")


def every_second(start: datetime, end: datetime) -> list[datetime]:
    """Every whole second in [start, end]."""
    first = int(start.timestamp()) + (0 if start.timestamp() == int(start.timestamp()) else 1)
    return [datetime.fromtimestamp(t, UTC) for t in range(first, int(end.timestamp()) + 1)]


def fire_records(kazoo: KazooClient, client_id: str, job: str) -> dict[str, FireRecord]:
    """The job's fire records in ZooKeeper, by instant (the znode's name)."""
    folder = ClusterPaths(client_id).job_fires(job)
    records = {}
    for child in kazoo.get_children(folder):
        try:
            records[child] = FireRecord.from_json(kazoo.get(f"{folder}/{child}")[0])
        except NoNodeError:  # pruned since the listing
            continue
    return records


def states_of(zk: str, client_id: str, job: str, instants: list[datetime]) -> dict[str, str]:
    """What the job's history says of these instants (`abandoned`, `skipped (reason)`, or
    `no record`): a failure message that says why an instant did not run."""
    from integration.harness import run_cli  # harness imports this module

    done = run_cli(zk, client_id, "jobs", "history", job, "--json", "--limit", "1000")
    rows = json.loads(done.stdout) if done.returncode == 0 else []
    by_key = {
        r.get("fire_key"): r["state"] + (f" ({r['skip_reason']})" if r.get("skip_reason") else "")
        for r in rows
    }
    out = {}
    for instant in instants:
        key = fire_key(job, instant)
        out[key] = by_key.get(key, "no record")
    return out


def name_instant_pid_lines(path: Path) -> list[tuple[str, str, int]]:
    """`<name> <UTC instant> <pid>` lines an integration's example wrote (one per run or
    send); a line cut short by a kill is left out."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            out.append((parts[0], parts[1], int(parts[2])))
    return out
