"""Decoding what a znode holds: the one boundary every JSON value read from ZooKeeper passes.

Anything in ZooKeeper may be hostile or broken (written by hand, by another version, by a
tool, or random bytes): it is refused here, with a reason an operator can act on, before any
reader trusts its shape. The cost is bounded by the value's own size: a size limit before
parsing, nesting beyond the parser's recursion refused (100,000 nested arrays once stopped
every daemon's membership refresh), numbers that are not finite (NaN, Infinity) and
integers too long to convert refused. Readers then check types and ranges of the fields
they use; a failure damages that record only (one job disabled, one member ignored, one fire
record reported).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_ZNODE_BYTES = 1 << 20  # ZooKeeper's own default jute.maxbuffer
# JSON's escape of a UTF-16 surrogate (D800-DFFF): only then can a value hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class ZnodeDataError(ValueError):
    """A znode's value is not what it must be; the message says what and why."""


class _Unfit:
    """Where a number that is not finite stood, in a value decoded keeping them."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not finite>"


UNFIT = _Unfit()


def load_json(raw: bytes, what: str, limit: int = MAX_ZNODE_BYTES) -> Any:
    """The JSON value in `raw` (the data of `what`, e.g. "member znode m-1.0000000003"), or
    ZnodeDataError saying why it is not one."""
    return _decode(raw, what, limit, keep=False)[0]


def load_json_keeping_unfit(
    raw: bytes, what: str, limit: int = MAX_ZNODE_BYTES
) -> tuple[Any, bool]:
    """As `load_json`, for a value that holds many records (a job bucket): a number that is
    not finite (NaN, Infinity, 1e999) decodes as UNFIT and a lone surrogate is kept, so that
    the caller confines them to the record holding them (`unfit_problem`) instead of losing
    every record with it. The flag: whether it may hold one (if not, no walk is needed)."""
    return _decode(raw, what, limit, keep=True)


def _decode(raw: bytes, what: str, limit: int, keep: bool) -> tuple[Any, bool]:
    if len(raw) > limit:
        raise ZnodeDataError(f"{what} is {len(raw)} bytes; the limit is {limit}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ZnodeDataError(f"{what} is not UTF-8 text") from None
    found = False

    def unfit(literal: str) -> Any:
        nonlocal found
        if not keep:
            raise ValueError(f"{literal[:20]} is not a finite number")
        found = True
        return UNFIT

    def number(literal: str) -> Any:
        value = float(literal)  # 1e999 is inf: as unfit as Infinity
        return value if math.isfinite(value) else unfit(literal)

    try:
        value = json.loads(text, parse_constant=unfit, parse_float=number)
    except RecursionError:
        raise ZnodeDataError(f"{what} is nested too deeply to be a record") from None
    except ValueError as exc:  # also integers too long to convert
        raise ZnodeDataError(f"{what} is not JSON: {str(exc)[:200]}") from None
    if _SURROGATE_ESCAPE.search(text):
        if keep:
            found = True
        elif not _is_unicode(value):
            # "\ud800" alone parses, then fails every encode (a path, a log line, a re-write)
            raise ZnodeDataError(f"{what} holds text that is not Unicode (a lone surrogate)")
    return value, found


def unfit_problem(value: Any) -> str | None:
    """Why a value decoded keeping unfit ones cannot be used (None: it can). Iterative: the
    parser's own depth limit leaves no room for a recursive walk."""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is UNFIT:
            return "it holds a number that is not finite (NaN, Infinity or too large)"
        if isinstance(item, str) and not _encodes(item):
            return "it holds text that is not Unicode (a lone surrogate)"
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")  # a lone surrogate cannot be
    except UnicodeEncodeError:
        return False
    return True


def _is_unicode(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_object(raw: bytes, what: str, limit: int = MAX_ZNODE_BYTES) -> dict[str, Any]:
    """As `load_json`, for a value that must be a JSON object."""
    value = load_json(raw, what, limit)
    if not isinstance(value, dict):
        raise ZnodeDataError(f"{what} is not a JSON object")
    return value


def finite_number(value: object) -> float | None:
    """`value` as a float when it is a JSON number a float holds: not a bool, not an
    integer past a float's range (math.isfinite raises on those), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
