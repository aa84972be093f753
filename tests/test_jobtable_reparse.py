"""A daemon reading a changed table keeps the entries of the jobs stored as they were
(`parse_stored_again`), and parses every other one afresh."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.jobspec import JobSpec
from zksched.core.jobtable import StoredJob, parse_stored, parse_stored_again

STAMP = "2026-12-05T08:00:00Z"


def stored(spec: JobSpec, stamp: str = STAMP) -> StoredJob:
    return StoredJob(spec.name, spec.to_record(), stamp)


def test_a_job_stored_as_it_was_keeps_its_entry() -> None:
    spec = JobSpec("backup", "0 2 * * *", ("/bin/true",), timezone="Europe/Paris")
    before = parse_stored(stored(spec))
    assert parse_stored_again(stored(spec), before) is before


def test_a_changed_record_or_stamp_is_parsed_afresh() -> None:
    spec = JobSpec("backup", "0 2 * * *", ("/bin/true",))
    before = parse_stored(stored(spec))
    paused = JobSpec("backup", "0 2 * * *", ("/bin/true",), paused=True)
    again = parse_stored_again(stored(paused), before)
    assert again is not before and again.spec == paused
    later = parse_stored_again(stored(spec, "2026-12-05T09:00:00Z"), before)
    assert later is not before and later.updated_at == "2026-12-05T09:00:00Z"
    # a record that is not what the spec writes (a key left out, an older writer): parsed
    record = spec.to_record()
    del record["history"]
    fresh = parse_stored_again(StoredJob("backup", record, STAMP), before)
    assert fresh is not before and fresh == before


def test_a_broken_record_is_never_taken_for_the_entry_before() -> None:
    spec = JobSpec("backup", "0 2 * * *", ("/bin/true",))
    before = parse_stored(stored(spec))
    broken = {**spec.to_record(), "schedule": "not cron"}
    entry = parse_stored_again(StoredJob("backup", broken, STAMP), before)
    assert entry.spec is None and entry.error
    # and an entry that was broken is parsed again, whatever is stored now
    assert parse_stored_again(stored(spec), entry) == before


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["0 2 * * *", "*/5 * * * *", "30 1 L * *"]),
    st.sampled_from(["UTC", "Europe/Berlin"]),
    st.booleans(),
    st.integers(0, 3),
    st.sampled_from(["0 2 * * *", "*/5 * * * *"]),
    st.booleans(),
)
def test_what_it_gives_is_what_a_fresh_parse_gives(
    schedule: str, zone: str, paused: bool, retries: int, other: str, same_stamp: bool
) -> None:
    old = JobSpec("j", schedule, ("/bin/true",), timezone=zone, paused=paused, retries=retries)
    new = JobSpec("j", other, ("/bin/true",), timezone=zone, paused=paused, retries=retries)
    stamp = STAMP if same_stamp else "2026-12-05T10:00:00Z"
    before = parse_stored(stored(old))
    now = stored(new, stamp)
    assert parse_stored_again(now, before) == parse_stored(now)


def test_the_fire_table_holds_the_runnable_jobs_alone() -> None:
    """`name in` a FireTable (and its specs) is `name` among the runnable entries: a job
    disabled by a bad record, or not in the table, is not in it."""
    from zksched.core.jobtable import FireTable

    good = parse_stored(stored(JobSpec("good", "0 2 * * *", ("/bin/true",))))
    bad = parse_stored(StoredJob("bad", {"name": "bad", "format": 1}, STAMP))
    table = FireTable({"good": good, "bad": bad})
    assert bad.spec is None
    assert "good" in table and "good" in table.specs
    for name in ("bad", "missing"):
        assert name not in table and name not in table.specs
        assert table.get(name) is None
    assert list(table) == ["good"] and len(table) == 1
    assert table["good"] == (good.spec, table.changed(STAMP))
