"""Exit codes and the one-line errors the CLI prints (never a traceback for an expected error)."""

from __future__ import annotations

import click

from zksched.cli.output import say

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INVALID = 2
EXIT_UNREACHABLE = 3


class CliFailure(click.ClickException):
    """An expected failure: printed as one line `zksched: <message>`, exit with `exit_code`."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: object = None) -> None:
        say(f"zksched: {self.format_message()}", err=True)


def invalid(message: str) -> CliFailure:
    return CliFailure(message, EXIT_INVALID)
