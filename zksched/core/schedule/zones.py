"""IANA time zones: loading them safely, and finding where their UTC offset changes.

zoneinfo answers "what is the offset at instant t" but has no public way to list transitions,
which the schedule math needs (to know where a wall-clock time is skipped or repeated). We
find them by probing: the offset is sampled every `_PROBE` seconds and each change is pinned
to the exact second by bisection. This is exact as long as a zone never changes its offset
twice within `_PROBE` seconds; in tzdata (1900 onwards, future rules included) offset changes
are at least ~4 days apart, and `_PROBE` is one day. Results are cached in chunks of ~194 days.

All instants here are integer seconds since the Unix epoch (UTC); offsets are integer seconds.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The instants schedule math supports: years 2..9998, so that wall-clock times (offsets are
# within ±26 h) and the datetimes we build never leave datetime's range.
MIN_INSTANT = int((datetime(2, 1, 1, tzinfo=UTC) - _EPOCH).total_seconds())
MAX_INSTANT = int((datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC) - _EPOCH).total_seconds())
# The largest offset change in tzdata is 24 h (date-line moves); a repeated wall-clock time
# is at most that far from the change that repeats it.
MAX_OFFSET_CHANGE = 26 * 3600

_CHUNK_BITS = 24  # 2**24 s ≈ 194 days per cached chunk
_PROBE = 86_400

_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+){0,3}")
# Files in a zoneinfo tree that are not zones a job should name ("right/" zones count leap
# seconds, which would shift every fire by ~27 s).
_NOT_ZONES = {"localtime", "posixrules", "leapseconds", "tzdata.zi", "zone.tab", "zone1970.tab"}


ZONE_HINT = 'use an IANA name such as "Europe/Berlin" or "UTC"'


class UnknownZoneError(ValueError):
    """The name is not an IANA time zone available on this host."""


def _show(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 48 else text[:45] + "..."


@lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name such as "Europe/Berlin"; UnknownZoneError if none."""
    if not isinstance(name, str):
        raise UnknownZoneError(f"a time zone must be a string, not {type(name).__name__}")
    if (
        len(name) > 128
        or not _ZONE_NAME.fullmatch(name)
        or name in _NOT_ZONES
        or name.startswith(("posix/", "right/"))
    ):
        raise UnknownZoneError(f"unknown time zone {_show(name)}")
    try:
        return ZoneInfo(name)
    except Exception:  # not found, a directory, not a TZif file...: all "unknown"
        raise UnknownZoneError(f"unknown time zone {_show(name)}") from None


@dataclass(frozen=True)
class _Chunk:
    start: int
    end: int
    first_offset: int  # the offset in effect at `start`
    # (instant, offset before, offset after), ascending, start <= instant < end; the offset
    # is `before` at instant - 1 and `after` from instant on.
    changes: tuple[tuple[int, int, int], ...]


class ZoneOffsets:
    """Offsets and offset changes of one zone, computed lazily and cached per chunk."""

    _MAX_CHUNKS = 2048

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._chunks: dict[int, _Chunk] = {}
        self._lock = threading.Lock()

    def _offset(self, instant: int) -> int:
        instant = min(max(instant, MIN_INSTANT), MAX_INSTANT)
        offset = (_EPOCH + timedelta(seconds=instant)).astimezone(self.zone).utcoffset()
        assert offset is not None  # a ZoneInfo always has one
        return offset.days * 86_400 + offset.seconds

    def _build(self, index: int) -> _Chunk:
        start = index << _CHUNK_BITS
        end = start + (1 << _CHUNK_BITS)
        changes: list[tuple[int, int, int]] = []
        previous = start - 1
        previous_offset = self._offset(previous)
        probe = previous
        while probe < end - 1:
            probe = min(probe + _PROBE, end - 1)
            offset = self._offset(probe)
            if offset != previous_offset:
                # Exactly one change in (previous, probe]: bisect to its first second.
                low, high = previous, probe
                while high - low > 1:
                    middle = (low + high) // 2
                    if self._offset(middle) == previous_offset:
                        low = middle
                    else:
                        high = middle
                changes.append((high, previous_offset, offset))
            previous, previous_offset = probe, offset
        return _Chunk(start, end, self._offset(start), tuple(changes))

    def chunk(self, instant: int) -> _Chunk:
        index = instant >> _CHUNK_BITS
        found = self._chunks.get(index)
        if found is None:
            found = self._build(index)
            with self._lock:
                if len(self._chunks) >= self._MAX_CHUNKS:
                    self._chunks.clear()
                self._chunks[index] = found
        return found

    def piece(self, instant: int) -> tuple[int, int, tuple[int, int] | None]:
        """(offset at `instant`, end of the constant-offset stretch, change at that end).

        The stretch ends at the next offset change, given as (offset before, offset after),
        or at the end of the cached chunk with None (the offset may well stay the same).
        """
        chunk = self.chunk(instant)
        offset = chunk.first_offset
        for at, before, after in chunk.changes:
            if at <= instant:
                offset = after
            else:
                return offset, at, (before, after)
        return offset, chunk.end, None

    def offset_at(self, instant: int) -> int:
        return self.piece(instant)[0]

    def last_change(self, instant: int, reach: int) -> tuple[int, int, int] | None:
        """The latest change at or before `instant` and after `instant - reach`, if any."""
        chunk = self.chunk(instant)
        for at, before, after in reversed(chunk.changes):
            if at <= instant:
                return (at, before, after) if at > instant - reach else None
        if instant - reach < chunk.start:
            previous = self.chunk(chunk.start - 1)
            if previous.changes:
                at, before, after = previous.changes[-1]
                if at > instant - reach:
                    return at, before, after
        return None


@lru_cache(maxsize=1024)
def zone_offsets(name: str) -> ZoneOffsets:
    """The shared, cached ZoneOffsets of a zone name (UnknownZoneError if unknown)."""
    return ZoneOffsets(load_zone(name))
