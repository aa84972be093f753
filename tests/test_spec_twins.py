"""`SpecTwins.from_record` gives what `JobSpec.from_record` gives, record for record, however
the records before it went: the same spec (its record, its hash), or the same problems."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zksched.core.jobspec import MAX_RECORD_BYTES, JobSpec, JobSpecError, canonical_json
from zksched.core.jobspec.twins import SpecTwins

BASE = JobSpec("base", "0 2 * * *", ("/bin/true",)).to_record()

# each key's values: good ones, and ones that are equal to a good one to Python but not
# to JSON (True and 1, 1.0 and 1), or bad
_VALUES: dict[str, list[Any]] = {
    "name": ["a", "b", "job-000001", "x" * 150, "../x", "", "a/b", 7, None],
    "schedule": [
        "0 2 * * *",
        "*/5 * * * *",
        "0 0 L * *",
        "at 2030-01-01T00:00:00Z",
        "61 * * * *",
        "",
        5,
        None,
        "@daily",
    ],
    "format": [1, True, 1.0, 2, "1"],
    "command": [["/bin/true"], ["/bin/echo", "hi"], [], [1], ["a", ["b"]], "/bin/true", [True]],
    "timezone": ["UTC", "Europe/Paris", "Mars/Olympus", 0],
    "timeout": [None, "1h", "0s", "-1s", 3600, True],
    "jitter": ["0s", "30s", 30, "1y"],
    "overlap": ["skip", "allow", "queue", "sometimes", 1],
    "catchup": ["latest", "all", "none", "never"],
    "history": [20, 1, True, 20.0, 0, 10**30, "20"],
    "paused": [False, True, 0, 1, "no"],
    "labels": [{}, {"role": "db"}, {"zone": "a", "role": "db"}, {"role": 1}, {"role": ["db"]}, []],
    "env": [{}, {"A": "1"}, {"A": True}, {"A": "1", "B": "2"}],
    "workdir": [None, "/srv", "relative", 5],
    "kind": ["command", "function", "other"],
    "retries": [0, 2, True, -1],
    "delivery": ["at-most-once", "at-least-once", "twice"],
    "bogus": [1],
}


def _record(changes: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    record = dict(BASE, **changes)
    for key in dropped:
        record.pop(key, None)
    return record


@st.composite
def _tables(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Records that differ in a few keys (so that twins, and near-twins, meet often)."""
    keys = draw(st.lists(st.sampled_from(sorted(_VALUES)), min_size=1, max_size=3, unique=True))
    dropped = draw(st.lists(st.sampled_from(["command", "timeout", "labels"]), max_size=1))
    picks = st.fixed_dictionaries({k: st.sampled_from(_VALUES[k]) for k in keys})
    return [_record(p, dropped) for p in draw(st.lists(picks, min_size=1, max_size=30))]


def _outcome(parse: Any, record: object) -> tuple[str, Any]:
    try:
        spec = parse(record)
    except JobSpecError as exc:
        return "refused", [(p.job, p.field, p.message) for p in exc.problems]
    return "spec", (spec, spec.to_record(), spec.content_hash, spec.schedule_obj)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_tables(), st.integers(1, 4))
def test_twins_parse_every_record_as_from_record_does(
    records: list[dict[str, Any]], size: int
) -> None:
    twins = SpecTwins(size)
    for record in records:
        assert _outcome(twins.from_record, record) == _outcome(JobSpec.from_record, record)


def test_a_twin_has_its_own_name_schedule_and_hash_and_shares_the_rest() -> None:
    twins = SpecTwins()
    first = twins.from_record(dict(BASE, name="a", labels={"role": "db"}))
    second = twins.from_record(dict(BASE, name="b", schedule="*/5 * * * *", labels={"role": "db"}))
    assert (second.name, second.schedule) == ("b", "*/5 * * * *")
    assert second == JobSpec.from_record(
        dict(BASE, name="b", schedule="*/5 * * * *", labels={"role": "db"})
    )
    assert second.content_hash != first.content_hash
    assert second.schedule_obj != first.schedule_obj
    assert second.labels is first.labels and second.command is first.command


@pytest.mark.parametrize(
    ("twin", "why"),
    [
        ({"name": "../x"}, "name"),
        ({"schedule": "61 * * * *"}, "schedule"),
        ({"history": True}, "history"),  # JSON's true, although Python's True == 1
        ({"format": True}, "format"),
    ],
)
def test_a_twin_that_is_refused_is_refused_in_full_words(twin: dict[str, Any], why: str) -> None:
    twins = SpecTwins()
    twins.from_record(dict(BASE, name="a", history=1, format=1))
    record = dict(BASE, name="b", history=1) | twin
    with pytest.raises(JobSpecError) as refused:
        twins.from_record(record)
    with pytest.raises(JobSpecError) as in_full:
        JobSpec.from_record(record)
    assert [str(p) for p in refused.value.problems] == [str(p) for p in in_full.value.problems]
    assert any(p.field == why for p in refused.value.problems)


def test_a_longer_name_can_make_a_twin_too_big() -> None:
    """The size limit counts the name: a twin of a record just under it, with a longer name,
    is over it."""
    command = ["x" * 1000] * 250
    size = len(canonical_json(JobSpec.from_record(dict(BASE, name="a", command=command))))
    command.append("y" * (MAX_RECORD_BYTES - size - 10))  # 10 bytes under, with its quotes
    record = dict(BASE, name="a", command=command)
    twins = SpecTwins()
    assert len(canonical_json(twins.from_record(record))) == MAX_RECORD_BYTES - 7
    longer = dict(record, name="a" * 120)
    with pytest.raises(JobSpecError, match="limit"):
        JobSpec.from_record(longer)
    with pytest.raises(JobSpecError, match="limit"):
        twins.from_record(longer)
