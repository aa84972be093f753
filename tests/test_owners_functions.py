"""Who owns function jobs: only app members that registered the function with the table's
very spec; daemons run command jobs only, app members function jobs only."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.jobspec import JobSpec
from zksched.core.members import Member, MemberRecordError, member_from_record
from zksched.core.owners import OwnerTable

FN = JobSpec("invoice", "0 2 * * *", (), kind="function")
OLD = JobSpec("invoice", "0 3 * * *", (), kind="function")
CMD = JobSpec("backup", "0 2 * * *", ("/usr/bin/backup",))


def app(member_id: str, *specs: JobSpec) -> Member:
    return Member(member_id, functions={s.name: s.definition_hash for s in specs})


@given(st.lists(st.sampled_from(["d1", "d2", "a1", "a2", "a3", "old1"]), unique=True))
@settings(max_examples=200)
def test_function_jobs_go_to_registering_apps_and_commands_to_daemons(ids: list[str]) -> None:
    members = [
        Member(i) if i.startswith("d") else app(i, OLD if i.startswith("old") else FN, CMD)
        for i in ids
    ]
    table = OwnerTable(members)
    fn_owner, cmd_owner = table.job_owner("invoice", FN), table.job_owner("backup", CMD)
    apps = [i for i in ids if i.startswith("a")]
    daemons = [i for i in ids if i.startswith("d")]
    assert (fn_owner in apps) if apps else fn_owner is None
    assert (cmd_owner in daemons) if daemons else cmd_owner is None


def test_pausing_a_function_job_does_not_change_who_may_run_it() -> None:
    # `zksched jobs pause` rewrites the table's record with paused = true; the apps' members
    # still advertise their registered (unpaused) definition
    paused = dataclasses.replace(FN, paused=True)
    assert paused.content_hash != FN.content_hash
    assert paused.definition_hash == FN.definition_hash == FN.content_hash
    assert OwnerTable([app("a1", FN)]).job_owner("invoice", paused) == "a1"


def test_a_changed_spec_moves_the_job_to_members_that_registered_it() -> None:
    members = [app("old1", OLD), app("new1", FN)]
    assert OwnerTable(members).job_owner("invoice", FN) == "new1"
    assert OwnerTable(members).job_owner("invoice", OLD) == "old1"
    assert OwnerTable([app("old1", OLD)]).job_owner("invoice", FN) is None


def test_member_records_carry_functions_and_refuse_broken_ones() -> None:
    member = app("a1", FN)
    record = member.to_record()
    assert record["functions"] == {"invoice": FN.content_hash}
    assert member_from_record("a1.0000000001", record).functions == {"invoice": FN.content_hash}
    assert "functions" not in Member("d1").to_record()  # daemons' records unchanged
    for broken in ([], {"../x": FN.content_hash}, {"invoice": 5}, {"invoice": "short"}):
        try:
            member_from_record("a1.0000000001", {**record, "functions": broken})
        except MemberRecordError:
            continue
        raise AssertionError(f"accepted functions={broken!r}")


def test_a_name_that_is_no_job_goes_to_an_app_member_never_a_daemon() -> None:
    # Cluster.is_owner(name) for an app's own timer: a daemon sharing the cluster id would
    # never act on it, so the name must go to an app
    for n in range(50):
        name = f"report-{n}"
        table = OwnerTable([Member(f"d{i}") for i in range(5)] + [app("a1"), app("a2")])
        assert table.owner(name, apps_only=True) in ("a1", "a2")
    assert OwnerTable([Member("d1")]).owner("report", apps_only=True) is None
