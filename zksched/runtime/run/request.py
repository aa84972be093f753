"""What a run is asked (`RunRequest`) and what it answers (`RunResult`).

- **Exit codes.** ``exit_code`` is the command's exit status, or minus the signal number when
  a signal killed it (as `subprocess` reports it: -15 for SIGTERM, -9 for SIGKILL), or None
  when it never started. A timeout or terminate keeps whatever status the command ended
  with (usually -15, or -9 when it ignored SIGTERM, or its own code when it handled SIGTERM).
- **Status.** ``ok``: exit 0. ``failed``: non-zero exit or killed by a signal we did not
  send. ``timeout`` / ``terminated``: we killed it (a command that exited before we acted
  keeps its own status: terminate() racing with exit is harmless). ``error``: it never ran.
  ``error`` carries a one-line explanation for every status but ``ok``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

RunStatus = Literal["ok", "failed", "timeout", "terminated", "error"]


@dataclass(frozen=True)
class RunRequest:
    job: str
    fire_key: str
    argv: tuple[str, ...]  # exec'd as is: no shell, ever
    env: Mapping[str, str]  # the job's env plus ZKSCHED_* vars, merged by the caller
    cwd: str | None = None  # None -> "/" (never the daemon's cwd); must be absolute
    timeout: float | None = None  # seconds from start; None (or inf) = no limit


@dataclass(frozen=True)
class RunResult:
    status: RunStatus
    exit_code: int | None  # exit status; -N when killed by signal N; None if it never started
    started_at: float  # epoch seconds (time.time())
    finished_at: float  # when the command's exit was seen (== started_at for "error")
    error: str | None = None  # one line on what went wrong; None for "ok"
    output_truncated: bool = False
