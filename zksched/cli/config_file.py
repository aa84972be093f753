"""Reading the daemon config file that `--config` names (checked whole, or refused)."""

from __future__ import annotations

from pathlib import Path

from zksched.cli.errors import EXIT_INVALID, CliFailure
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


def default_config_path() -> str | None:
    """The default config file, when it exists."""
    return DEFAULT_CONFIG_PATH if Path(DEFAULT_CONFIG_PATH).is_file() else None
