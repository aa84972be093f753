"""Printing: aligned tables for people, JSON for machines (snake_case keys as stored)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from zksched.core.text import printable, printable_lines


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers], *[[cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        say("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def cell(value: Any) -> str:
    """A value as the operator reads it in a table or a `key: value` line: yes/no for
    booleans, `-` for none (None, an empty table or list), `k=v,…` for a table, `a, b` for
    a list; never Python's spelling (`False`, `None`, `{}`, `['a']`). JSON output keeps
    the values as they are."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return printable(",".join(f"{k}={cell(v)}" for k, v in sorted(value.items())) or "-")
    if isinstance(value, list | tuple):
        return printable(", ".join(cell(v) for v in value) or "-")
    return printable(str(value))


def say(text: object = "", err: bool = False) -> None:
    """`click.echo` for every line the CLI writes: it may carry values read from ZooKeeper
    or a file (names, states, errors, reasons), so each line is made printable, and what
    the stream cannot encode is written escaped (a strange value never crashes a report)."""
    stream = sys.stderr if err else sys.stdout
    encoding = getattr(stream, "encoding", None) or "utf-8"
    shown = printable_lines(str(text))
    try:
        shown = shown.encode(encoding, "backslashreplace").decode(encoding, "replace")
    except LookupError:  # an encoding name Python does not know
        shown = shown.encode("ascii", "backslashreplace").decode("ascii")
    click.echo(shown, err=err)
