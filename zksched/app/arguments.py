"""The arguments of `Cluster(...)`, checked before anything is made.

A bad argument raises ValueError naming the argument, the value given (never the `auth`
credential) and what is accepted, the same way for a wrong type ("10" for a number) as for a
wrong value: never a bare TypeError from deeper down. Nothing is connected or started by
the constructor, so nothing has changed when it raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, cast

from zksched.core.names import name_problem, parse_label
from zksched.runtime.status import parse_http_address
from zksched.zk.connection import CONNECT_STRING_FORM, parse_connect_string

SESSION_TIMEOUT_RANGE = (1.0, 600.0)  # seconds, as `zksched run --session-timeout`
STOP_GRACE_RANGE = (0.0, 86_400.0)  # seconds, as `zksched run --stop-grace`
CONCURRENCY_RANGE = (1, 4096)
SESSION_LOSS_CHOICES = ("terminate", "continue")


def _said(argument: str, value: object) -> str:
    """`Cluster(argument=value)`, the value cut short when it is long."""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"Cluster({argument}={shown})"


def _kind(value: object) -> str:
    return type(value).__name__


def connect_string_problem(zk: str) -> str | None:
    """Why `zk` is not a ZooKeeper connect string, or None (for config keys that hold one)."""
    try:
        parse_connect_string(zk)
    except ValueError as exc:
        return str(exc)
    return None


def check_zk(zk: object) -> str:
    if not isinstance(zk, str):
        raise ValueError(
            f"{_said('zk', zk)}: the ZooKeeper connect string must be a str, "
            f"{CONNECT_STRING_FORM}; not {_kind(zk)}"
        )
    try:
        parse_connect_string(zk)
    except ValueError as exc:
        raise ValueError(f"{_said('zk', zk)}: {exc}") from None
    return zk


def check_name(argument: str, value: object, what: str) -> str:
    problem = name_problem(value, what)
    if problem is not None:
        raise ValueError(f"{_said(argument, value)}: {problem}")
    return cast(str, value)


def check_labels(labels: object) -> dict[str, str]:
    if labels is None:
        return {}
    accepted = 'a dict of str to str, such as {"role": "web"}'
    if not isinstance(labels, Mapping):
        raise ValueError(
            f"{_said('labels', labels)}: labels must be {accepted}, not {_kind(labels)}"
        )
    checked: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(
                f"{_said('labels', labels)}: label {key!r}: keys and values must be str "
                f"(labels are {accepted}), not {_kind(key if not isinstance(key, str) else value)}"
            )
        try:
            parse_label(f"{key}={value}")
        except ValueError as exc:
            raise ValueError(f"{_said('labels', labels)}: {exc}") from None
        checked[key] = value
    return checked


def check_number(
    argument: str, value: object, limits: tuple[float, float], what: str, example: str
) -> float:
    low, high = limits
    accepted = f"{what} must be a number of seconds from {low:g} to {high:g}, such as {example}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{_said(argument, value)}: {accepted}; not {_kind(value)}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{_said(argument, value)}: {accepted}")
    return float(value)


def check_concurrency(value: object) -> int:
    low, high = CONCURRENCY_RANGE
    accepted = f"concurrency (functions run at once) must be a whole number from {low} to {high}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{_said('concurrency', value)}: {accepted}; not {_kind(value)}")
    if not low <= value <= high:
        raise ValueError(f"{_said('concurrency', value)}: {accepted}")
    return value


def check_auth(auth: object) -> str | None:
    """The credential is never shown: a message names its form only."""
    if auth is None:
        return None
    accepted = "auth must be the digest credential 'USER:PASSWORD' (a str), or None"
    if not isinstance(auth, str):
        raise ValueError(f"Cluster(auth=...): {accepted}; not {_kind(auth)}")
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise ValueError(f"Cluster(auth=...): {accepted}; the one given has no user or password")
    return auth


def check_bool(argument: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{_said(argument, value)}: {argument} must be True or False")
    return value


def check_session_loss(value: object) -> Literal["terminate", "continue"]:
    if value not in SESSION_LOSS_CHOICES or not isinstance(value, str):
        raise ValueError(
            f"{_said('on_session_loss', value)}: on_session_loss must be one of "
            + ", ".join(repr(c) for c in SESSION_LOSS_CHOICES)
        )
    return cast(Literal["terminate", "continue"], value)


def check_http(http: object) -> str | None:
    if http is None or http == "":
        return None
    if not isinstance(http, str):
        raise ValueError(
            f"{_said('http', http)}: http must be 'HOST:PORT' (a str) such as "
            f"'127.0.0.1:9464', or None for no port; not {_kind(http)}"
        )
    parse_http_address(http, what=f"{_said('http', http)}: http")
    return http
