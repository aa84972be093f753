"""Helpers for reporting problems in a TOML file: a value's TOML type, lines, parse errors.

Shared by job files (zksched.core.jobspec) and the daemon's config file
(zksched.core.config): tomllib keeps no line numbers after a parse, and its error messages
carry the position in a form the reports rewrite.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from datetime import date, datetime, time

# Where tomllib's TOMLDecodeError message says the error is.
TOML_ERROR_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def toml_kind(value: object) -> str:
    """The TOML name of a value's type (never its repr: values may be huge or deeply nested)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, datetime):
        return "a date-time"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, time):
        return "a time"
    if value is None:
        return "null"
    return type(value).__name__


class TomlLines:
    """Best-effort line numbers of tables and keys (tomllib reports none after a parse).

    Recognises `[a.b]` headers and `key =` / `a.b =` lines, skipping multi-line strings.
    Used only to point at problems, so a miss just means a message without a line.
    """

    _KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
    _PATH = re.compile(rf"\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*")
    _PART = re.compile(_KEY)

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        in_string: str | None = None
        for number, line in enumerate(text.splitlines()[:1_000_000], start=1):
            if in_string is not None:
                if line.count(in_string) % 2 == 1:
                    in_string = None
                continue
            stripped = line.strip()
            if stripped.startswith("["):
                inner = stripped.lstrip("[")
                match = self._PATH.match(inner)
                if match is not None and inner[match.end() :].startswith("]"):
                    table = self._path(match.group(1))
                    self._lines.setdefault(table, number)
                continue
            match = self._PATH.match(line)
            if match is not None and line[match.end() :].startswith("="):
                self._lines.setdefault(table + self._path(match.group(1)), number)
                rest = line[match.end() + 1 :]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_string = quote

    def _path(self, text: str) -> tuple[str, ...]:
        parts = []
        for token in self._PART.findall(text):
            if token.startswith(('"', "'")):
                try:
                    token = tomllib.loads(f"k = {token}")["k"]
                except tomllib.TOMLDecodeError:
                    token = token[1:-1]
            parts.append(token)
        return tuple(parts)

    def __call__(self, *path: str) -> int | None:
        while path:
            found = self._lines.get(path)
            if found is not None:
                return found
            path = path[:-1]
        return None
