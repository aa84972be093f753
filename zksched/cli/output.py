"""Printing: aligned tables for people, JSON for machines (snake_case keys as stored)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from zksched.core.text import printable, printable_lines


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return printable(",".join(f"{k}={v}" for k, v in sorted(value.items())) or "-")
    return printable(str(value))


def say(text: object = "", err: bool = False) -> None:
    """`click.echo` for every line the CLI writes: it may carry values read from ZooKeeper
    (names, states, errors, reasons), so each line is made printable."""
    click.echo(printable_lines(str(text)), err=err)
