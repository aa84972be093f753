"""`zksched`: the command line, every command registered on the group (`group.py`)."""

from __future__ import annotations

import sys

from zksched.cli import (  # noqa: F401  (each module adds its commands to `cli`)
    audit_cmds,
    cluster_cmds,
    config_cmds,
    history_cmds,
    jobs_cmds,
    oneoff_cmds,
    schedule_cmds,
    status_cmds,
)
from zksched.cli.errors import CliFailure
from zksched.cli.group import cli

__all__ = ["cli", "main"]


def main() -> None:
    try:
        cli.main(prog_name="zksched", standalone_mode=True)
    except CliFailure as exc:  # raised outside click's own handling (e.g. at import)
        exc.show()
        sys.exit(exc.exit_code)
