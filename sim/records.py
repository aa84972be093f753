"""The simulated fire records in the ZooKeeper model: where they live, how they are encoded.

A record is its fields joined by "|": status ("running", "skipped", or a result), member,
session, nonce, kind, reason, and for a skip the start of the range it covers and its count.
The members write them; the checker reads what is left.
"""

from __future__ import annotations

from datetime import datetime

from zksched.core.firekey import format_utc


def fires_of(job: str) -> str:
    return f"/fires/{job}"


def record_path(job: str, instant: datetime) -> str:
    return f"/fires/{job}/{format_utc(instant)}"


def encode(*fields: object) -> bytes:
    return "|".join("" if f is None else str(f) for f in fields).encode()


def decode(data: bytes) -> list[str]:
    return data.decode().split("|")
