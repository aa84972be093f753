"""A job's fields: the keys a job may set, their limits, and one check per key.

Each check turns a file or record value into the spec's value, or raises `_Bad` saying why;
`_check_job_table` runs them over a whole job (or [defaults]) table and collects every
problem.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any, Literal, cast

from zksched.core.durations import format_duration_ms, parse_duration_ms
from zksched.core.jobspec.frozenmap import EMPTY_MAP, FrozenMap
from zksched.core.jobspec.problems import SpecProblem, _Bad, _LineOf, _show
from zksched.core.names import name_problem, parse_label
from zksched.core.schedule import (
    AtError,
    CronSyntaxError,
    UnknownZoneError,
    at_schedule,
    is_at,
    load_zone,
    parse_cron,
)
from zksched.core.tomltext import toml_kind

MAX_ARGS = 1024
MAX_ARG_CHARS = 65_536
MAX_ENV = 256
MAX_LABELS = 64
MAX_WORKDIR_CHARS = 4096
MAX_JITTER_MS = 86_400_000  # 1d
MAX_RETRIES = 10
MIN_RETRY_BACKOFF_MS, MAX_RETRY_BACKOFF_MS = 100, 86_400_000  # 100ms .. 1d
MAX_CATCHUP_WINDOW_MS = 366 * 86_400_000
MIN_HISTORY, MAX_HISTORY = 1, 1000

Overlap = Literal["skip", "allow"]
Catchup = Literal["latest", "all", "none"]
Delivery = Literal["at-most-once", "at-least-once"]
Kind = Literal["command", "function"]
OVERLAP_POLICIES: tuple[Overlap, ...] = ("skip", "allow")
DELIVERY_MODES: tuple[Delivery, ...] = ("at-most-once", "at-least-once")
CATCHUP_POLICIES: tuple[Catchup, ...] = ("latest", "all", "none")
# a function job runs a Python function that apps register (zksched.Cluster), not a command
JOB_KINDS: tuple[Kind, ...] = ("command", "function")

# Every key a job (or [defaults]) may set, in the order problems are reported.
JOB_KEYS = (
    "schedule",
    "command",
    "timezone",
    "timeout",
    "jitter",
    "overlap",
    "catchup",
    "catchup_window",
    "retries",
    "retry_backoff",
    "delivery",
    "labels",
    "env",
    "history",
    "paused",
    "workdir",
    "kind",
)
REQUIRED_KEYS = ("schedule", "command")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


# -- value checks, one per key; each turns a file/record value into the spec's value ------------


def _string(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} must be a string, not {toml_kind(value)}")
    if len(value) > limit:
        raise _Bad(f"{what} is {len(value)} characters long; the limit is {limit}")
    if "\x00" in value:
        raise _Bad(f"{what} contains a NUL character")
    if not value.isascii():  # only non-ASCII text can hold a lone surrogate
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _Bad(f"{what} is not valid Unicode (a lone surrogate)") from None
    return value


def _check_schedule(value: object) -> str:
    text = _string(value, "the schedule", 1024)
    if is_at(text):  # a one-off job's (`at` in a job file)
        try:
            return at_schedule(text)
        except AtError as exc:
            raise _Bad(str(exc)) from None
    try:
        return parse_cron(text).text
    except CronSyntaxError as exc:
        raise _Bad(str(exc)) from None


def _check_timezone(value: object) -> str:
    name = _string(value, "the time zone", 128)
    try:
        load_zone(name)
    except UnknownZoneError as exc:
        raise _Bad(f'{exc} (use an IANA name such as "Europe/Berlin" or "UTC")') from None
    return sys.intern(name)  # a few zones among many jobs: one string each


def _check_command(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise _Bad(
            'the command must be an array of strings (argv, no shell), e.g. ["/usr/bin/backup", '
            '"--full"]; for a shell line use ["/bin/sh", "-c", "..."]'
        )
    if not isinstance(value, list | tuple):
        raise _Bad(f"the command must be an array of strings, not {toml_kind(value)}")
    if not value:
        raise _Bad("the command must not be empty")
    if len(value) > MAX_ARGS:
        raise _Bad(f"the command has {len(value)} arguments; the limit is {MAX_ARGS}")
    # plain strings only, looked up or kept: nothing else is hashed or compared here
    plain = all(type(arg) is str for arg in value)
    if plain:
        seen = _ARGVS.get(tuple(value))
        if seen is not None:
            return seen
    argv = tuple(_string(arg, f"argument {i}", MAX_ARG_CHARS) for i, arg in enumerate(value))
    if argv[0] == "":
        raise _Bad("the command's program (its first element) must not be empty")
    return _keep(_ARGVS, argv, argv) if plain else argv


# One object for equal values among the many jobs a daemon holds (a million jobs that run
# the same script, or keep the default durations), each checked once; bounded (emptied
# when full), so never a leak. Only values that passed their check are kept.
_KEPT = 4096
_ARGVS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _keep(kept: dict[Any, Any], key: Any, value: Any) -> Any:
    """`value`, kept under `key` in a memo that is emptied when full."""
    if len(kept) >= _KEPT:
        kept.clear()
    kept[key] = value
    return value


def _remembered(check: Callable[[object], Any]) -> Callable[[object], Any]:
    """`check`, run once per distinct string value (what most keys hold)."""
    kept: dict[str, Any] = {}

    def checked(value: object) -> Any:
        if type(value) is not str:  # not a subclass either: equal is then the same value
            return check(value)
        found = kept.get(value, kept)
        if found is kept:  # a bad value raises in `check`: never kept
            found = _keep(kept, value, check(value))
        return found

    return checked


@lru_cache(maxsize=1024)
def _seconds(millis: int) -> float:
    return millis / 1000


# a few distinct durations among a million jobs: each parsed once (a bad one, never kept,
# raises each time)
_duration_ms = lru_cache(maxsize=1024)(parse_duration_ms)


def _millis(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str):
        raise _Bad(f'{what} must be a duration string such as "30s", not {toml_kind(value)}')
    try:
        return _duration_ms(value)
    except ValueError as exc:
        raise _Bad(str(exc)) from None


def _check_timeout(value: object) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    millis = _millis(value, "the timeout")
    if millis <= 0:
        raise _Bad('the timeout must be positive (leave it out, or write "none", for no limit)')
    return _seconds(millis)


def _check_jitter(value: object) -> float:
    millis = _millis(value, "the jitter")
    if millis > MAX_JITTER_MS:
        raise _Bad(f"the jitter is {format_duration_ms(millis)}; the limit is 1d")
    return _seconds(millis)


def _check_catchup_window(value: object) -> float:
    millis = _millis(value, "the catch-up window")
    if millis > MAX_CATCHUP_WINDOW_MS:
        raise _Bad(f"the catch-up window is {format_duration_ms(millis)}; the limit is 366d")
    return _seconds(millis)


def _check_retries(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"retries must be an integer, not {toml_kind(value)}")
    if not 0 <= value <= MAX_RETRIES:
        shown = str(value) if abs(value) < 10**12 else "a huge number"
        raise _Bad(f"retries must be between 0 and {MAX_RETRIES}, got {shown}")
    return value


def _check_retry_backoff(value: object) -> float:
    millis = _millis(value, "the retry backoff")
    if not MIN_RETRY_BACKOFF_MS <= millis <= MAX_RETRY_BACKOFF_MS:
        raise _Bad(
            f"the retry backoff is {format_duration_ms(millis)}; it must be between "
            f"{format_duration_ms(MIN_RETRY_BACKOFF_MS)} and "
            f"{format_duration_ms(MAX_RETRY_BACKOFF_MS)}"
        )
    return _seconds(millis)


def _choice(value: object, what: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        shown = _show(value) if isinstance(value, str) else toml_kind(value)
        raise _Bad(f"{what} must be one of {', '.join(choices)}; got {shown}")
    return choices[choices.index(value)]  # the one shared string, not the record's copy


def _check_overlap(value: object) -> Overlap:
    return cast(Overlap, _choice(value, "overlap", OVERLAP_POLICIES))


def _check_delivery(value: object) -> Delivery:
    return cast(Delivery, _choice(value, "delivery", DELIVERY_MODES))


def _check_catchup(value: object) -> Catchup:
    return cast(Catchup, _choice(value, "catchup", CATCHUP_POLICIES))


def _table(value: object, what: str, limit: int) -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise _Bad(
            f'{what} must be a table of strings, e.g. {{ KEY = "value" }}, not {toml_kind(value)}'
        )
    if len(value) > limit:
        raise _Bad(f"{what} has {len(value)} entries; the limit is {limit}")
    return value


def _entries(
    value: object, what: str, limit: int, check: Callable[[object, object], str]
) -> FrozenMap:
    """Check every entry of a labels/env table, reporting all bad entries at once."""
    if type(value) is dict and not value:
        return EMPTY_MAP  # what most jobs have
    good: dict[str, str] = {}
    bad: list[str] = []
    for key, item in _table(value, what, limit).items():
        try:
            good[cast(str, key)] = check(key, item)
        except _Bad as exc:
            bad.append(str(exc))
    if bad:
        raise _Bad("; ".join(bad))
    return FrozenMap(good) if good else EMPTY_MAP  # most jobs have none: share one


def _label_entry(key: object, item: object) -> str:
    problem = name_problem(key, "label key")
    if problem is not None:
        raise _Bad(problem)
    text = _string(item, f"label {_show(cast(str, key))}", 256)
    try:
        parse_label(f"{key}={text}")  # the rule members' --label values follow
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    return text


def _env_entry(key: object, item: object) -> str:
    if not isinstance(key, str) or not (key.isascii() and _ENV_NAME.fullmatch(key)):
        shown = _show(key) if isinstance(key, str) else toml_kind(key)
        raise _Bad(
            f"environment variable name {shown} is not allowed: use letters, digits and "
            "'_', not starting with a digit"
        )
    if key.upper().startswith("ZKSCHED_"):
        raise _Bad(f"environment variable {key} is reserved: zksched sets ZKSCHED_* itself")
    return _string(item, f"the value of {key}", MAX_ARG_CHARS)


def _check_labels(value: object) -> FrozenMap:
    return _entries(value, "labels", MAX_LABELS, _label_entry)


def _check_env(value: object) -> FrozenMap:
    return _entries(value, "env", MAX_ENV, _env_entry)


def _check_history(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"history must be an integer, not {toml_kind(value)}")
    if not MIN_HISTORY <= value <= MAX_HISTORY:
        shown = str(value) if abs(value) < 10**12 else "a huge number"
        raise _Bad(f"history must be between {MIN_HISTORY} and {MAX_HISTORY}, got {shown}")
    return value


def _check_kind(value: object) -> Kind:
    return cast(Kind, _choice(value, "kind", JOB_KINDS))


def _check_paused(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"paused must be true or false, not {toml_kind(value)}")
    return value


def _check_workdir(value: object) -> str | None:
    if value is None:
        return None
    path = _string(value, "workdir", MAX_WORKDIR_CHARS)
    if not path.startswith("/"):
        raise _Bad(f"workdir must be an absolute path, got {_show(path)}")
    return path


_CHECKS: dict[str, Callable[[object], Any]] = {
    "schedule": _remembered(_check_schedule),
    "command": _check_command,
    "timezone": _remembered(_check_timezone),
    "timeout": _remembered(_check_timeout),
    "jitter": _remembered(_check_jitter),
    "overlap": _check_overlap,
    "catchup": _check_catchup,
    "catchup_window": _remembered(_check_catchup_window),
    "retries": _check_retries,
    "retry_backoff": _remembered(_check_retry_backoff),
    "delivery": _check_delivery,
    "labels": _check_labels,
    "env": _check_env,
    "history": _check_history,
    "paused": _check_paused,
    "workdir": _remembered(_check_workdir),
    "kind": _check_kind,
}


def _unknown_key(key: object, known: Iterable[str]) -> str:
    if not isinstance(key, str):
        return "unknown key"
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; known keys: {', '.join(known)}"


def _check_job_table(
    raw: Mapping[Any, object],  # any keys: a record's or a file's, checked here
    job: str | None,
    problems: list[SpecProblem],
    line_of: _LineOf,
    where: tuple[str, ...] = (),
    prefix: str = "",
    passed_over: tuple[str, ...] = (),
) -> dict[str, object] | None:
    """Check each key of a job (or [defaults]) table, but those `passed_over` (checked by
    the caller); the good values, or None if any is bad."""
    values: dict[str, object] = {}
    bad = False
    for key, value in raw.items():
        check = _CHECKS.get(key)
        if check is None:
            if key in passed_over:
                continue
            shown_key = key if isinstance(key, str) else "?"
            problems.append(
                SpecProblem(
                    job,
                    prefix + shown_key,
                    _unknown_key(key, JOB_KEYS),
                    line_of(*where, shown_key),
                )
            )
            bad = True
            continue
        try:
            values[key] = check(value)
        except _Bad as exc:
            problems.append(SpecProblem(job, prefix + key, str(exc), line_of(*where, key)))
            bad = True
    return None if bad else values


def _missing(present: Mapping[str, object], job: str | None, line: int | None) -> list[SpecProblem]:
    """A problem for each required key not in `present` (a function job has no command)."""
    if "schedule" in present and "command" in present:
        return []
    keys = set(present)
    if present.get("kind") == "function":
        keys.add("command")
    hints = {
        "schedule": 'every job needs one, e.g. schedule = "0 2 * * *" (or, to run it once, '
        'at = "2026-12-24T18:00:00+01:00")',
        "command": 'every job needs one: an argv array, e.g. command = ["/usr/bin/backup"]',
    }
    return [
        SpecProblem(job, key, f"missing: {hints[key]}", line)
        for key in REQUIRED_KEYS
        if key not in keys
    ]
