"""The machine and the code a result came from, recorded with every result."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

from tools.bench.registry import Result


def machine() -> Result:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "mmh3": _version("mmh3"),
        "zksched": _version("zksched"),
        "git_commit": _git_commit(),
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    # Which code produced the numbers; absent outside a checkout, which is fine.
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None
