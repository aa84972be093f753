"""Names that end up in znode paths (job names and cluster ids share one rule), and sets of
job names that keep their order (`JobNames`)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_NAME_RE = re.compile(NAME_PATTERN)


def name_problem(value: object, what: str = "name") -> str | None:
    """Why `value` is not a valid job name / client id, or None when it is.

    The rule keeps names safe as a single znode path component: no `/`, no NUL,
    not `.` or `..` (they must start with a letter or digit), at most 128 characters.
    """
    if not isinstance(value, str):
        return f"{what} must be a string, not {type(value).__name__}"
    if value == "":
        return f"{what} must not be empty: {_RULE}"
    if len(value) > 128:
        return f"{what} is {len(value)} characters long; the limit is 128"
    if not _NAME_RE.fullmatch(value):
        return f"{what} {value!r} is not allowed: {_RULE}"
    return None


_RULE = "use letters, digits, '_', '.' and '-', starting with a letter or digit"


def is_valid_name(value: object) -> bool:
    return name_problem(value) is None


def parse_label(text: str) -> tuple[str, str]:
    """`role=db` -> ("role", "db"); ValueError with the reason otherwise."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"label {text!r} must look like KEY=VALUE")
    problem = name_problem(key, "label key")
    if problem:
        raise ValueError(problem)
    if len(value) > 256 or any(unicodedata.category(c)[0] in "CZ" and c != " " for c in value):
        raise ValueError(f"label value for {key!r} must be at most 256 printable characters")
    return key, value


class JobNames(frozenset[str]):
    """A set of job names that also keeps one order of them (`in_order`): the order they
    came in, which every replay of the same events gives (a set's own order varies with
    the hash seed). A member acts on a million moved jobs in it without sorting them."""

    __slots__ = ("in_order",)
    in_order: tuple[str, ...]

    def __new__(cls, names: Iterable[str] = ()) -> JobNames:
        in_order = tuple(names)
        self = super().__new__(cls, in_order)
        if len(self) < len(in_order):  # each once, where it first came
            in_order = tuple(dict.fromkeys(in_order))
        self.in_order = in_order
        return self
