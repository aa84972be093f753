"""Durations as operators write them in job files: `500ms`, `30s`, `5m`, `1h`, `1d`, `1h30m`.

Durations have millisecond precision and are handled as integer milliseconds internally, so
parsing and formatting round-trip exactly; the public API speaks float seconds.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# Largest unit first: format_duration picks the largest unit that divides exactly.
_UNIT_MS: dict[str, int] = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_UNIT_ORDER = {unit: rank for rank, unit in enumerate(_UNIT_MS)}
# `ms` must be tried before `m` and `s`; digits are bounded so hostile input stays cheap.
_PART = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)(ms|d|h|m|s)")
_MAX_TEXT = 64
# Ten years: far beyond any sensible timeout or window, small enough to stay exact in floats.
MAX_DURATION_MS = 3650 * 86_400_000

_HINT = "use a number and a unit, e.g. 500ms, 30s, 5m, 1h, 1d (or combined, e.g. 1h30m)"


def _show(text: str) -> str:
    shown = text if len(text) <= 40 else text[:37] + "..."
    return repr(shown)


def parse_duration_ms(text: str) -> int:
    """`text` as integer milliseconds; ValueError with an operator-readable message."""
    if not isinstance(text, str):
        raise ValueError(f'a duration must be a string such as "30s", not {type(text).__name__}')
    stripped = text.strip()
    if stripped == "":
        raise ValueError(f"empty duration: {_HINT}")
    if len(stripped) > _MAX_TEXT:
        raise ValueError(f"duration {_show(stripped)} is too long: {_HINT}")
    if stripped == "0":
        return 0
    total = Decimal(0)
    position = 0
    last_rank = -1
    while position < len(stripped):
        match = _PART.match(stripped, position)
        if match is None:
            raise ValueError(f"invalid duration {_show(stripped)}: {_HINT}")
        number, unit = match.groups()
        rank = _UNIT_ORDER[unit]
        if rank <= last_rank:
            raise ValueError(
                f"invalid duration {_show(stripped)}: units must go from largest to smallest, "
                "each at most once (e.g. 1h30m)"
            )
        last_rank = rank
        try:
            total += Decimal(number) * _UNIT_MS[unit]
        except InvalidOperation:  # pragma: no cover - the regex admits only plain decimals
            raise ValueError(f"invalid duration {_show(stripped)}: {_HINT}") from None
        position = match.end()
    if total != total.to_integral_value():
        raise ValueError(f"duration {_show(stripped)} is finer than a millisecond")
    millis = int(total)
    if millis > MAX_DURATION_MS:
        raise ValueError(f"duration {_show(stripped)} is too long; the limit is 3650d")
    return millis


def parse_duration(text: str) -> float:
    """`text` (e.g. "1h30m", "500ms") in seconds. Raises ValueError saying what is wrong."""
    return parse_duration_ms(text) / 1000


def format_duration_ms(millis: int) -> str:
    if millis < 0:
        raise ValueError(f"a duration cannot be negative ({millis}ms)")
    if millis == 0:
        return "0s"
    for unit, size in _UNIT_MS.items():
        if millis % size == 0:
            return f"{millis // size}{unit}"
    raise AssertionError("unreachable: every integer is a whole number of milliseconds")


def format_duration(seconds: float) -> str:
    """The canonical text of a duration: one unit, the largest that divides it ("90s", "1h").

    Sub-millisecond parts are rounded to the nearest millisecond.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"a duration must be a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be finite, not {seconds}")
    return format_duration_ms(round(seconds * 1000))
