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
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


class ZnodeDataError(ValueError):
    """A znode's value is not what it must be; the message says what and why."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number here")


class _Unfit:
    """Where NaN or Infinity stood, in a value decoded with `keep_unfit`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not finite>"


UNFIT = _Unfit()


def load_json(
    raw: bytes, what: str, limit: int = MAX_ZNODE_BYTES, *, keep_unfit: bool = False
) -> Any:
    """The JSON value in `raw` (the data of `what`, e.g. "member znode m-1.0000000003"), or
    ZnodeDataError saying why it is not one.

    `keep_unfit`: for a value that holds many records (a job bucket), NaN and Infinity
    decode as UNFIT and lone surrogates are kept, so that the caller confines them to the
    record holding them (`unfit_problem`) instead of losing every record with it."""
    if len(raw) > limit:
        raise ZnodeDataError(f"{what} is {len(raw)} bytes; the limit is {limit}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ZnodeDataError(f"{what} is not UTF-8 text") from None
    constant = _keep_unfit if keep_unfit else _no_constant
    try:
        value = json.loads(text, parse_constant=constant)
    except RecursionError:
        raise ZnodeDataError(f"{what} is nested too deeply to be a record") from None
    except ValueError as exc:  # also integers too long to convert
        raise ZnodeDataError(f"{what} is not JSON: {str(exc)[:200]}") from None
    if not keep_unfit and _SURROGATE_ESCAPE.search(text) and not _is_unicode(value):
        # "\ud800" alone parses, then fails every encode (a path, a log line, a re-write)
        raise ZnodeDataError(f"{what} holds text that is not Unicode (a lone surrogate)")
    return value


def _keep_unfit(_name: str) -> Any:
    return UNFIT


def unfit_problem(value: Any) -> str | None:
    """Why a value decoded with `keep_unfit` cannot be used (None: it can). Iterative: the
    parser's own depth limit leaves no room for a recursive walk."""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is UNFIT:
            return "it holds a number that is not finite (NaN or Infinity)"
        if isinstance(item, str) and not _encodes(item):
            return "it holds text that is not Unicode (a lone surrogate)"
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def may_hold_unfit(raw: bytes) -> bool:
    """Whether `raw` may decode to a value `unfit_problem` refuses (a byte search: most
    values need no walk)."""
    return b"NaN" in raw or b"Infinity" in raw or _SURROGATE_BYTES.search(raw) is not None


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
