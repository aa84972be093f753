"""`zksched config check FILE`, and reading the daemon config file for `--config`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import click

from zksched.cli.errors import EXIT_INVALID, CliFailure
from zksched.cli.main import cli
from zksched.cli.output import say
from zksched.core.config import (
    DEFAULT_CONFIG_PATH,
    MAX_CONFIG_BYTES,
    ConfigError,
    ConfigProblem,
    FileConfig,
)
from zksched.core.config import parse_config as _parse_config
from zksched.zk.connection import parse_connect_string


def load_config_file(path: str) -> FileConfig:
    """Read and check a config file; ConfigError lists every problem (unreadable included)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError([ConfigProblem(None, "the file does not exist", None, path)]) from None
    except IsADirectoryError:
        raise ConfigError([ConfigProblem(None, "is a directory, not a file", None, path)]) from None
    except OSError as exc:
        raise ConfigError(
            [ConfigProblem(None, f"cannot be read: {exc.strerror or exc}", None, path)]
        ) from None
    return _parse_config(data, path, check_connect_string=parse_connect_string)


def config_failure(exc: ConfigError, path: str) -> CliFailure:
    """One line for a command that cannot start because its config file is bad (exit 2)."""
    first = exc.problems[0]
    more = len(exc.problems) - 1
    tail = f" (and {more} more: run `zksched config check {path}`)" if more else ""
    return CliFailure(f"config file {first}{tail}", EXIT_INVALID)


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


def default_config_path() -> str | None:
    """The default config file, when it exists."""
    return DEFAULT_CONFIG_PATH if Path(DEFAULT_CONFIG_PATH).is_file() else None
