"""Checking a table of records that differ, record to record, only in name and schedule.

A table of a million jobs is written by a program: most records are the same but for the
job's name and its schedule. `SpecTwins.from_record` checks a record in full
(`JobSpec.from_record`) unless it equals one of the last few it accepted but for those two;
then the result is built from that spec's checked values with the record's own name and
schedule (`JobSpec._from_checked`, as a full check ends), through every check that depends
on them (the schedule's, the name's, the checks across fields, the size). Either way it is
the spec, or the error, that `JobSpec.from_record` gives for the same record: a property
test holds the two together. Twins share their command, labels and env (immutable).

For records as JSON decodes them (plain dicts, lists, strings, numbers): the comparison is
Python's `==`, told apart only by type where JSON's values meet (true is 1, 1 is 1.0).
"""

from __future__ import annotations

from typing import Any

from zksched.core.jobspec.fields import _CHECKS
from zksched.core.jobspec.problems import JobSpecError, _Bad
from zksched.core.jobspec.spec import JobSpec, _field_defaults

_check_schedule = _CHECKS["schedule"]
_NUMBERS = (int, float, bool)  # equal across types: each compared by type too
# what `JobSpec._from_checked` takes but the name; what is computed from a spec (its parsed
# schedule, its hash) is a twin's own
_SHARED = tuple(k for k, _ in _field_defaults() if k[0] != "_" and k != "name")


class _Template:
    """An accepted record, its spec's checked values, and what a record must match to be
    its twin."""

    __slots__ = ("_probe", "_typed", "values")

    def __init__(self, record: dict[str, Any], spec: JobSpec) -> None:
        self._probe = dict(record)  # its name and schedule are overwritten by each probe
        self._typed = tuple((k, type(v)) for k, v in record.items() if type(v) in _NUMBERS)
        self.values = {k: getattr(spec, k) for k in _SHARED}

    def matches(self, record: dict[str, Any], name: str, schedule: str) -> bool:
        probe = self._probe
        probe["name"] = name
        probe["schedule"] = schedule
        return probe == record and all(type(record[k]) is t for k, t in self._typed)


def _plain(value: object) -> bool:
    """What a template may hold: JSON's scalars, and lists and tables of strings (inside
    them only exact strings compare equal to exact strings alone)."""
    if type(value) is list:
        return all(type(item) is str for item in value)
    if type(value) is dict:
        return all(type(k) is str and type(v) is str for k, v in value.items())
    return type(value) in (str, int, float, bool, type(None))


class SpecTwins:
    """`JobSpec.from_record`, remembering the last `size` records it accepted (one table's
    read: create one for it and let it go)."""

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._templates: list[_Template] = []  # the last matched first

    def from_record(self, record: object) -> JobSpec:
        if type(record) is dict:
            name, schedule = record.get("name"), record.get("schedule")
            if type(name) is str and type(schedule) is str:
                spec = self._twin(record, name, schedule)
                if spec is not None:
                    return spec
        spec = JobSpec.from_record(record)  # raises for a bad record: nothing is kept
        if type(record) is dict and all(_plain(v) for v in record.values()):
            self._templates.insert(0, _Template(record, spec))
            del self._templates[self._size :]
        return spec

    def _twin(self, record: dict[str, Any], name: str, schedule: str) -> JobSpec | None:
        templates = self._templates
        for i, template in enumerate(templates):
            if template.matches(record, name, schedule):
                if i:
                    templates.insert(0, templates.pop(i))
                return _renamed(template.values, name, schedule)
        return None


def _renamed(values: dict[str, Any], name: str, schedule: str) -> JobSpec | None:
    """The spec of these checked `values` with this name and schedule, if both pass (the
    checks across fields and the size are `_from_checked`'s); None if not: the caller
    checks the record in full, for the problems' own words."""
    try:
        return JobSpec._from_checked(name, {**values, "schedule": _check_schedule(schedule)})
    except (_Bad, JobSpecError):
        return None
