"""`zksched config check FILE`."""

from __future__ import annotations

import os
import stat

import click

from zksched.cli.config_file import load_config_file
from zksched.cli.errors import EXIT_INVALID, CliFailure
from zksched.cli.group import cli
from zksched.cli.output import say
from zksched.core.config import (
    ConfigError,
    FileConfig,
)


def _secret_readable_by_others(path: str, config: FileConfig) -> bool:
    if "auth" not in config.options:
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


@cli.group("config")
def config_group() -> None:
    """The daemon config file (--config, default /etc/zksched/zksched.toml)."""


@config_group.command("check")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=True))
def check_config(file: str) -> None:
    """Validate a config file without starting anything.

    Exit 0 when it is valid; otherwise print every problem, one a line, naming the key and
    the line, and exit 2.
    """
    try:
        config = load_config_file(file)
    except ConfigError as exc:
        for problem in exc.problems:
            say(str(problem), err=True)
        count = len(exc.problems)
        raise CliFailure(
            f"{file}: {count} problem{'s' if count != 1 else ''} found", EXIT_INVALID
        ) from None
    if _secret_readable_by_others(file, config):
        say(
            f"warning: {file} holds a ZooKeeper credential (auth) and is readable by group or "
            "others; chmod 600 it",
            err=True,
        )
    keys = len(config.options) + len(config.run)
    say(f"{file}: OK ({keys} key{'s' if keys != 1 else ''} set)")
