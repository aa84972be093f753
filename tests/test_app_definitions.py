"""Function jobs' definitions: the decorator's options go through the job files' validator;
bad input raises at registration, naming the function and the option, registering nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from zksched import Cluster, Fire, JobDefinitionError
from zksched.core.jobspec import JobSpec, JobSpecError, parse_job_file
from zksched.core.jobtable import StoredJob, plan_apply, plan_register


def cluster() -> Cluster:
    return Cluster("127.0.0.1:1", "app-tests")


def nightly(fire: Fire) -> None:
    pass


def test_a_decorated_function_is_a_function_job_with_the_options_given() -> None:
    c = cluster()

    @c.cron("0 2 * * *", tz="Europe/Berlin", overlap="skip", catchup="latest", timeout="1h")
    def nightly_invoice(fire: Fire) -> None:
        pass

    spec = c.jobs["nightly_invoice"]
    assert spec.kind == "function" and spec.command == ()
    assert (spec.timezone, spec.timeout, spec.overlap) == ("Europe/Berlin", 3600.0, "skip")
    assert JobSpec.from_record(spec.to_record()) == spec  # the table's record reads back


def test_durations_as_text_seconds_or_timedeltas_are_the_same_job() -> None:
    specs = []
    for timeout in ("90s", 90, 90.0, timedelta(seconds=90)):
        c = cluster()
        c.add_job(nightly, "* * * * *", timeout=timeout, retry_backoff=timeout)
        specs.append(c.jobs["nightly"])
    assert all(s == specs[0] for s in specs)
    assert specs[0].content_hash == specs[-1].content_hash


@pytest.mark.parametrize(
    ("schedule", "options", "said"),
    [
        ("61 * * * *", {}, "schedule"),
        ("* * * * *", {"tz": "Mars/Olympus"}, "tz"),
        ("* * * * *", {"overlap": "sometimes"}, "overlap"),
        ("* * * * *", {"timeout": "soon"}, "timeout"),
        ("* * * * *", {"timeout": -5}, "timeout"),
        ("* * * * *", {"retries": 99}, "retries"),
        ("* * * * *", {"labels": {"bad key": "x"}}, "labels"),
        ("* * * * *", {"command": ["/bin/true"]}, "command"),
        ("* * * * *", {"env": {"A": "b"}}, "env"),
        ("* * * * *", {"colour": "blue"}, "colour"),
    ],
)
def test_bad_input_raises_at_registration_naming_function_and_option(
    schedule: str, options: dict[str, Any], said: str
) -> None:
    c = cluster()
    with pytest.raises(JobDefinitionError) as caught:
        c.cron(schedule, **options)(nightly)
    message = str(caught.value)
    assert "test_app_definitions.nightly" in message and said in message
    assert "nothing was registered" in message
    assert c.jobs == {}


def test_the_decorator_accepts_and_refuses_what_a_job_file_does() -> None:
    """One validator for both: the same values, the same verdicts."""
    cases: list[tuple[str, str]] = [
        ("schedule", '"0 2 L * *"'),
        ("schedule", '"0 2 32 * *"'),
        ("timezone", '"Europe/Berlin"'),
        ("timezone", '"Nowhere/City"'),
        ("jitter", '"30s"'),
        ("jitter", '"2d"'),
        ("catchup", '"all"'),
        ("catchup", '"some"'),
        ("history", "0"),
        ("history", "50"),
        ("delivery", '"at-least-once"'),
        ("delivery", '"exactly-once"'),
    ]
    import tomllib

    for key, text in cases:
        value = tomllib.loads(f"v = {text}")["v"]
        body = f'[jobs.j]\ncommand = ["/bin/true"]\n{key} = {text}\n'
        if key != "schedule":
            body += 'schedule = "* * * * *"\n'
        try:
            parse_job_file(body)
            file_ok = True
        except JobSpecError:
            file_ok = False
        option = {"timezone": "tz"}.get(key, key)
        schedule = value if key == "schedule" else "* * * * *"
        options = {} if key == "schedule" else {option: value}
        try:
            cluster().add_job(nightly, schedule, name="j", **options)
            app_ok = True
        except JobDefinitionError:
            app_ok = False
        assert app_ok == file_ok, (key, text)


def test_one_name_twice_in_one_process_is_refused() -> None:
    c = cluster()
    c.add_job(nightly, "* * * * *")
    with pytest.raises(JobDefinitionError, match="registered twice"):
        c.add_job(lambda fire: None, "0 * * * *", name="nightly")
    assert c.jobs["nightly"].schedule == "* * * * *"


def test_job_files_cannot_declare_function_jobs() -> None:
    with pytest.raises(JobSpecError, match="registered by the apps"):
        parse_job_file('[jobs.a]\nschedule = "* * * * *"\nkind = "function"\n')


def _stored(spec: JobSpec, at: str = "2026-01-01T00:00:00Z") -> StoredJob:
    return StoredJob(spec.name, spec.to_record(), at)


def test_registering_creates_keeps_and_refuses_to_change_without_replace() -> None:
    c = cluster()
    c.add_job(nightly, "0 2 * * *")
    mine = c.jobs["nightly"]
    other = JobSpec("nightly", "0 3 * * *", (), kind="function")
    now = "2026-12-03T00:00:00Z"

    created = plan_register({}, {"nightly": mine}, replace=False, now=now)
    assert created.created == ["nightly"] and created.table["nightly"].updated_at == now

    same = plan_register({"nightly": _stored(mine)}, {"nightly": mine}, False, now)
    assert not (same.created or same.replaced or same.conflicts)

    clash = plan_register({"nightly": _stored(other)}, {"nightly": mine}, False, now)
    assert "schedule" in clash.conflicts["nightly"] and "0 3 * * *" in clash.conflicts["nightly"]
    assert clash.table["nightly"].record == other.to_record()  # the table's stands

    replaced = plan_register({"nightly": _stored(other)}, {"nightly": mine}, True, now)
    assert replaced.replaced == ["nightly"]
    assert replaced.table["nightly"].record == mine.to_record()

    command = JobSpec("nightly", "0 2 * * *", ("/bin/true",))
    refused = plan_register({"nightly": _stored(command)}, {"nightly": mine}, False, now)
    assert "command job" in refused.conflicts["nightly"]


def test_replace_never_overwrites_a_command_job() -> None:
    c = cluster()
    c.add_job(nightly, "0 2 * * *")
    command = JobSpec("nightly", "0 2 * * *", ("/bin/true",))
    plan = plan_register({"nightly": _stored(command)}, c.jobs, True, "2026-12-03T00:00:00Z")
    assert not plan.replaced and "command job" in plan.conflicts["nightly"]
    assert plan.table["nightly"].record == command.to_record()


def test_the_tables_paused_state_stands_through_restarts_and_deploys() -> None:
    # `zksched jobs pause nightly` wrote paused = true; the replicas restart with the
    # decorator's definition (paused = false), or deploy a new one with replace=True
    c = cluster()
    c.add_job(nightly, "0 2 * * *")
    mine = c.jobs["nightly"]
    paused = {**mine.to_record(), "paused": True}
    now = "2026-12-03T00:00:00Z"

    restart = plan_register({"nightly": StoredJob("nightly", paused, "x")}, c.jobs, False, now)
    assert not (restart.created or restart.replaced or restart.conflicts)

    new = JobSpec("nightly", "0 3 * * *", (), kind="function")
    table = {"nightly": StoredJob("nightly", paused, "x")}
    deploy = plan_register(table, {"nightly": new}, True, now)
    assert deploy.replaced == ["nightly"]
    assert deploy.table["nightly"].record == {**new.to_record(), "paused": True}


def test_jobs_apply_prune_keeps_function_jobs() -> None:
    function = JobSpec("fn", "* * * * *", (), kind="function")
    command = JobSpec("old", "* * * * *", ("/bin/true",))
    current = {"fn": _stored(function), "old": _stored(command)}
    plan = plan_apply(current, {}, prune=True, now="2026-12-03T00:00:00Z")
    assert plan.deleted == ["old"] and plan.kept == ["fn"] and "fn" in plan.table


def test_a_function_job_in_the_cluster_is_never_replaced_by_a_job_file() -> None:
    function = JobSpec("fn", "* * * * *", (), kind="function")
    command = JobSpec("fn", "* * * * *", ("/bin/true",))
    plan = plan_apply({"fn": _stored(function)}, {"fn": command}, False, "2026-12-03T00:00:00Z")
    assert plan.refused == ["fn"] and not plan.changes
    assert plan.table["fn"].record == function.to_record()


def test_an_app_registers_at_most_max_functions() -> None:
    from zksched.core.members import MAX_FUNCTIONS

    c = cluster()
    for i in range(MAX_FUNCTIONS):
        c.add_job(nightly, "@hourly", name=f"j{i}")
    with pytest.raises(JobDefinitionError, match="at most 2,000"):
        c.add_job(nightly, "@hourly", name="one-more")
    assert len(c.jobs) == MAX_FUNCTIONS
