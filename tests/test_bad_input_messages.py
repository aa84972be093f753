"""Every message the library and the CLI give for bad input, read as a user reads it: each
names what was wrong (the argument, option or field, and the value given), says what is
accepted, and nothing has changed. The cases are listed here one by one; docs/library.md
has the short table.

`Cluster(...)` arguments are checked before anything is connected; the decorator's before
anything is registered; the CLI's before ZooKeeper is reached (exit 2, never 3: the tests
point it at a port where nothing answers)."""

from __future__ import annotations

from typing import Any

import pytest

from zksched import Cluster

ZK = "127.0.0.1:2181"

# (arguments, what must be named, what must be said to be accepted)
CLUSTER_CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"session_timeout": "10"}, "Cluster(session_timeout='10')", "number of seconds from 1 to 600"),
    ({"session_timeout": 0.5}, "Cluster(session_timeout=0.5)", "from 1 to 600"),
    ({"session_timeout": float("nan")}, "session_timeout=nan", "from 1 to 600"),
    ({"session_timeout": True}, "session_timeout=True", "number of seconds"),
    ({"session_timeout": None}, "session_timeout=None", "number of seconds"),
    ({"zk": 2181}, "Cluster(zk=2181)", "HOST[:PORT]"),
    ({"zk": ""}, "Cluster(zk='')", "HOST[:PORT]"),
    ({"zk": "h1:99999"}, "invalid port 99999", "1 to 65535"),
    ({"zk": "a b:2181"}, "invalid host 'a b:2181'", "HOST[:PORT]"),
    ({"zk": "h1/../x"}, "invalid chroot", "HOST[:PORT]"),
    ({"client_id": ""}, "Cluster(client_id='')", "use letters, digits"),
    ({"client_id": 5}, "Cluster(client_id=5)", "must be a string"),
    ({"client_id": "a b"}, "client id 'a b'", "use letters, digits"),
    ({"labels": ["role=web"]}, "Cluster(labels=['role=web'])", "dict of str to str"),
    ({"labels": {"role": 5}}, "label 'role'", "must be str"),
    ({"labels": {"a b": "x"}}, "label key 'a b'", "use letters, digits"),
    ({"labels": {"": "x"}}, "label key must not be empty", "use letters, digits"),
    ({"member_id": "a/b"}, "member id 'a/b'", "use letters, digits"),
    ({"member_id": 7}, "Cluster(member_id=7)", "must be a string"),
    ({"concurrency": "8"}, "Cluster(concurrency='8')", "whole number from 1 to 4096"),
    ({"concurrency": 0}, "Cluster(concurrency=0)", "from 1 to 4096"),
    ({"concurrency": 2.5}, "Cluster(concurrency=2.5)", "whole number"),
    ({"auth": "nopass"}, "Cluster(auth=...)", "'USER:PASSWORD'"),
    ({"auth": 5}, "Cluster(auth=...)", "'USER:PASSWORD'"),
    ({"replace": "yes"}, "Cluster(replace='yes')", "True or False"),
    ({"stop_grace": -1}, "Cluster(stop_grace=-1)", "from 0 to 86400"),
    ({"stop_grace": "30"}, "Cluster(stop_grace='30')", "number of seconds"),
    ({"on_session_loss": "kill"}, "Cluster(on_session_loss='kill')", "'terminate', 'continue'"),
    ({"http": "nope"}, "Cluster(http='nope')", "HOST:PORT"),
    ({"http": "127.0.0.1:99999"}, "port 99999", "0 to 65535"),
    ({"http": 9464}, "Cluster(http=9464)", "HOST:PORT"),
]


@pytest.mark.parametrize(("given", "named", "accepted"), CLUSTER_CASES)
def test_cluster_refuses_a_bad_argument_naming_it_and_what_is_accepted(
    given: dict[str, Any], named: str, accepted: str
) -> None:
    """`Cluster(session_timeout="10")` raised a bare TypeError ('<=' not supported between
    float and str); other wrong types went through (`replace="yes"`, `http=9464`)."""
    arguments: dict[str, Any] = {"zk": ZK, "client_id": "billing", **given}
    with pytest.raises(ValueError) as caught:
        Cluster(**arguments)
    message = str(caught.value)
    assert named in message and accepted in message, message


def test_the_credential_is_never_shown() -> None:
    with pytest.raises(ValueError) as caught:
        Cluster(ZK, "billing", auth="s3cret-no-colon")
    assert "s3cret" not in str(caught.value)


def test_good_arguments_of_every_accepted_type_are_taken() -> None:
    cluster = Cluster(
        ZK,
        "billing",
        labels={"role": "web"},
        member_id="web-1",
        concurrency=4,
        session_timeout=3,
        auth="app:pw",
        replace=True,
        stop_grace=0,
        on_session_loss="continue",
        http="",
    )
    assert cluster.client_id == "billing" and not cluster.running


# -- the decorator ---------------------------------------------------------------------------

OPTIONS_LIST = (
    "tz, timeout, jitter, overlap, catchup, catchup_window, retries, retry_backoff, "
    "delivery, labels, history, paused"
)
# (schedule, options, what must be named, what must be said to be accepted)
DECORATOR_CASES: list[tuple[object, dict[str, Any], str, str]] = [
    ("* * * *", {}, "schedule: schedule '* * * *' has 4 fields", "expected 5"),
    (5, {}, "schedule: 5 is not a schedule", 'a cron schedule such as "0 2 * * *"'),
    (None, {}, "schedule: missing", "at= a time to run once"),
    ("@daily", {"at": "2030-01-01T00:00:00Z"}, "at: a job has a schedule or an at", "not both"),
    (None, {"at": "tomorrow"}, "at: 'tomorrow' is not an ISO 8601 time", "2026-12-24T18:00:00"),
    ("* * * * *", {"timeout": [1]}, "timeout: [1] is not a duration", "a number of seconds"),
    ("* * * * *", {"timeout": [1]}, "timeout: [1]", "or a timedelta"),
    ("* * * * *", {"timeout": -5}, "timeout: -5 is not a duration", "zero or more seconds"),
    ("* * * * *", {"timeout": float("inf")}, "timeout: inf", "zero or more seconds"),
    ("* * * * *", {"timeout": "5 minutes"}, "invalid duration '5 minutes'", "e.g. 500ms, 30s"),
    ("* * * * *", {"jitter": True}, "jitter: True is not a duration", "a number of seconds"),
    ("* * * * *", {"timeuot": "5s"}, "timeuot: not an option of cron()", OPTIONS_LIST),
    ("* * * * *", {"timeuot": "5s"}, "did you mean 'timeout'?", OPTIONS_LIST),
    ("* * * * *", {"timezone": "UTC"}, "did you mean 'tz'?", OPTIONS_LIST),
    ("* * * * *", {"command": ["/bin/true"]}, "command: not an option of a", OPTIONS_LIST),
    ("* * * * *", {"env": {"A": "b"}}, "env: not an option of a function job", OPTIONS_LIST),
    ("* * * * *", {"workdir": "/"}, "workdir: not an option", OPTIONS_LIST),
    ("* * * * *", {"kind": "command"}, "kind: not an option", OPTIONS_LIST),
    ("* * * * *", {"tz": "Europe/Berln"}, "tz: unknown time zone 'Europe/Berln'", "an IANA name"),
    ("* * * * *", {"overlap": "never"}, "overlap: overlap must be one of", "skip, allow"),
    ("* * * * *", {"catchup": "some"}, "catchup: catchup must be one of", "latest, all, none"),
    ("* * * * *", {"retries": 11}, "retries: retries must be between 0 and 10", "got 11"),
    ("* * * * *", {"retries": "2"}, "retries: retries must be an integer", "an integer"),
    ("* * * * *", {"delivery": "once"}, "delivery: delivery must be one of", "at-least-once"),
    ("* * * * *", {"labels": "role=web"}, "labels: must be a dict", '{"role": "web"}'),
    ("* * * * *", {"labels": {"a b": "x"}}, "labels: label key 'a b'", "use letters, digits"),
    ("* * * * *", {"history": 0}, "history: history must be between 1 and 1000", "got 0"),
    ("* * * * *", {"paused": "no"}, "paused: must be True or False", "not 'no'"),
    ("* * * * *", {"retries": 1, "retry_backoff": "1ms"}, "retry_backoff", "between 100ms and 1d"),
    ("* * * * *", {"name": "a b"}, "name: job name 'a b'", "use letters, digits"),
]


def nightly(fire: object) -> None:
    pass


@pytest.mark.parametrize(("schedule", "options", "named", "accepted"), DECORATOR_CASES)
def test_the_decorator_names_the_job_the_option_and_what_is_accepted(
    schedule: object, options: dict[str, Any], named: str, accepted: str
) -> None:
    """`timeout=[1]` said "must be a duration string such as "30s"" though seconds and
    timedeltas are accepted; an unknown option listed command, env, workdir and kind as
    known keys; `timeout=-5` left out the job's name that every other message carries."""
    app = Cluster(ZK, "billing")
    options = dict(options)
    job = options.get("name", "nightly")
    with pytest.raises(ValueError) as caught:
        app.cron(schedule, **options)(nightly)  # type: ignore[arg-type]
    message = str(caught.value)
    assert f"test_bad_input_messages.nightly (job {job!r})" in message, message
    assert named in message and accepted in message, message
    assert message.endswith("; nothing was registered") and app.jobs == {}


def test_every_problem_is_said_at_once() -> None:
    app = Cluster(ZK, "billing")
    with pytest.raises(ValueError) as caught:
        app.cron("* * * * *", timeout=[1], colour="blue", overlap="never")(nightly)
    message = str(caught.value)
    for option in ("timeout:", "colour:", "overlap:"):
        assert option in message, message


def test_actions_before_start_raise_saying_what_questions_answer() -> None:
    """is_owner() before start() answered False while claim() and lock() raised: the
    questions answer False and the actions raise, and the actions' message says both."""
    from datetime import UTC, datetime

    app = Cluster(ZK, "billing")
    assert app.is_owner("nightly") is False and app.is_leader() is False
    assert app.connected is False and app.leader_term() is None
    for action in (
        lambda: app.claim("nightly", datetime(2030, 1, 1, tzinfo=UTC)),
        lambda: app.lock("migrations"),
        lambda: app.leader(timeout=0).__enter__(),
    ):
        with pytest.raises(RuntimeError) as caught:
            action()
        message = str(caught.value)
        assert "call start()" in message and "is_owner(), is_leader() and connected" in message
    app.stop()
    with pytest.raises(RuntimeError, match=r"the Cluster is stopped: .* make a new one"):
        app.claim("nightly", datetime(2030, 1, 1, tzinfo=UTC))


# -- the coordination API and the integrations -----------------------------------------------


def test_the_coordination_api_names_what_was_wrong() -> None:
    from datetime import UTC, datetime

    from tests.test_coordination_horizon import coordinator
    from zksched.app.coordination import finished_record
    from zksched.core.firerecord import FireRecord
    from zksched.zk.paths import ClusterPaths

    when = datetime(2030, 1, 1, tzinfo=UTC)
    app, claims = coordinator(when)
    running = FireRecord("j", "2030-01-01T00:00:00Z", "m", 1, "n", "running", "x")
    cases: list[tuple[Any, str, str]] = [
        (lambda: app.claim("a b", when), "claim name 'a b'", "use letters"),
        (lambda: app.claim("ok", when.replace(tzinfo=None)), "naive 2030", "datetime.now(UTC)"),
        (lambda: app.claim("ok", "2030-01-01"), "not str", "must be a datetime"),
        (lambda: ClusterPaths("c").app_lock("a b"), "lock name 'a b'", "use letters"),
        (lambda: finished_record(running, "done", None, "x"), "not 'done'", "ok, failed, error"),
    ]
    for call, named, accepted in cases:
        with pytest.raises(ValueError) as caught:
            call()
        message = str(caught.value)
        assert named in message and accepted in message, message
    assert claims.created == []  # nothing was claimed


CELERY_CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"zksched_client_id": None}, "zksched_client_id", "ZKSCHED_CLIENT_ID"),
    ({"zksched_client_id": "a b"}, "zksched_client_id", "use letters, digits"),
    ({"zksched_zk": "a b:1"}, "zksched_zk", "HOST[:PORT]"),
    ({"zksched_session_timeout": "abc"}, "zksched_session_timeout = 'abc'", "from 1 to 600"),
    ({"zksched_session_timeout": 0.5}, "zksched_session_timeout = 0.5", "from 1 to 600"),
    ({"zksched_connect_timeout": 0}, "zksched_connect_timeout = 0", "number of seconds from 0.1"),
    ({"zksched_connect_timeout": "soon"}, "zksched_connect_timeout = 'soon'", "seconds"),
]


@pytest.mark.parametrize(("conf", "named", "accepted"), CELERY_CASES)
def test_celery_beat_names_the_config_key_and_what_is_accepted(
    conf: dict[str, Any], named: str, accepted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad key stops beat at startup, before it connects (ZooKeeper is never reached)."""
    from celery import Celery
    from celery.exceptions import ImproperlyConfigured

    from zksched.integrations.celery import ClusterScheduler

    monkeypatch.delenv("ZKSCHED_CLIENT_ID", raising=False)
    monkeypatch.delenv("ZKSCHED_ZK", raising=False)
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update({"zksched_client_id": "c1", "zksched_zk": "127.0.0.1:1", **conf})
    with pytest.raises(ImproperlyConfigured) as caught:
        ClusterScheduler(app)
    message = str(caught.value)
    assert named in message and accepted in message, message


def test_celery_beat_names_the_entry_and_what_is_accepted() -> None:
    from celery import Celery
    from celery.exceptions import ImproperlyConfigured
    from celery.schedules import BaseSchedule, schedule

    from zksched.integrations.celery import ClusterScheduler

    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(
        zksched_client_id="c1",
        zksched_zk="127.0.0.1:1",
        beat_schedule={
            "a b": {"task": "t", "schedule": 60.0},
            "custom": {"task": "t", "schedule": BaseSchedule(app=app)},
            "fast": {"task": "t", "schedule": schedule(0.5, app=app)},
        },
    )
    with pytest.raises(ImproperlyConfigured) as caught:
        ClusterScheduler(app)
    message = str(caught.value)
    assert "beat entry name 'a b'" in message and "use letters, digits" in message
    assert "beat entry 'custom'" in message and "neither a crontab nor an interval" in message
    assert "beat entry 'fast': interval 0.5s is under 1 s" in message


def test_apscheduler_names_the_job_id_and_what_is_accepted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from zksched.integrations.apscheduler import ClusterExecutor

    executor = ClusterExecutor(Cluster(ZK, "web"))
    assert executor.claim_name("a b") is None
    (said,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "APScheduler job 'a b'" in said and "id of letters, digits" in said
    assert "add_job(..., id=...)" in said


# -- the CLI ---------------------------------------------------------------------------------

# (arguments after `zksched --zk <nowhere>`, what must be named, what must be accepted)
CLI_CASES: list[tuple[list[str], str, str]] = [
    (["--zk", "", "members"], "connect string is empty", "HOST[:PORT]"),
    (["--zk", "h1:99999", "members"], "invalid port 99999", "1 to 65535"),
    (["--zk", "a b", "members"], "invalid host 'a b'", "HOST[:PORT]"),
    (["--client-id", "a b", "members"], "client id 'a b'", "use letters, digits"),
    (["--client-id", "", "members"], "client id must not be empty", "use letters, digits"),
    (["--auth", "nopass", "members"], "--auth", "USER:PASSWORD"),
    (["--tls-cert", "/x", "members"], "TLS client certificate and key", "give both or neither"),
    (["--connect-timeout", "0", "members"], "'--connect-timeout': 0.0", "x>=0.1"),
    (["--log-level", "loud", "members"], "'--log-level': 'loud'", "'debug', 'info'"),
    (["run", "--label", "a b=c"], "--label: label key 'a b'", "use letters, digits"),
    (["run", "--label", "novalue"], "--label: label 'novalue'", "KEY=VALUE"),
    (["run", "--session-timeout", "0.5"], "--session-timeout: session timeout 0.5s", "1s to 600s"),
    (["run", "--session-timeout", "ten"], "'--session-timeout': 'ten'", "not a valid float"),
    (["run", "--member-id", "a/b"], "member id 'a/b'", "use letters, digits"),
    (["run", "--concurrency", "0"], "'--concurrency': 0", "1<=x<=4096"),
    (["run", "--on-session-loss", "kill"], "'--on-session-loss': 'kill'", "'terminate'"),
    (["run", "--stop-grace", "-1"], "'--stop-grace': -1.0", "0<=x<=86400"),
    (["run", "--allow-command", ""], "--allow-command: ''", "such as '/usr/bin/*'"),
    (["run", "--allow-command", "backup"], "--allow-command: 'backup'", "full path"),
    (["run", "--http", "nope"], "--http 'nope'", "HOST:PORT"),
    (["run", "--http", "1.2.3.4:99999"], "port 99999", "0 to 65535"),
    (["jobs", "at", "tomorrow", "j", "--", "/bin/true"], "WHEN 'tomorrow'", "+DURATION (+10m)"),
    (["jobs", "at", "+10x", "j", "--", "/bin/true"], "WHEN '+10x'", "e.g. 500ms, 30s"),
    (["jobs", "at", "2020-01-01T00:00:00Z", "j", "--", "/bin/true"], "has passed", "a time ahead"),
    (["jobs", "at", "2030-01-01T00:00:00.5Z", "j", "--", "x"], "a fraction", "whole seconds"),
    (["jobs", "at", "+10m", "a b", "--", "/bin/true"], "job name 'a b'", "use letters, digits"),
    (["jobs", "at", "+1m", "j", "--tz", "Mars/X", "--", "x"], "--tz: unknown time zone", "IANA"),
    (["jobs", "at", "+1m", "j", "--timeout", "5 min", "--", "x"], "--timeout: invalid", "30s"),
    (["jobs", "at", "+1m", "j", "--catchup-window", "x", "--", "x"], "--catchup-window", "500ms"),
    (["jobs", "at", "+1m", "j", "--label", "x", "--", "x"], "--label: label 'x'", "KEY=VALUE"),
    (["next", "* * * *"], "schedule '* * * *' has 4 fields", "expected 5"),
    (["next", "@daily", "--tz", "Mars/X"], "--tz: unknown time zone 'Mars/X'", "IANA name"),
    (["next", "@daily", "--after", "yesterday"], "--after 'yesterday'", "ISO 8601 time such as"),
    (["next", "@daily", "--count", "0"], "'--count' / '-n': 0", "1<=x<=10000"),
    (["audit", "--since", "yesterday"], "--since 'yesterday'", "ISO 8601 time such as"),
    (["jobs", "show", "a b"], "job name 'a b'", "use letters, digits"),
    (["jobs", "history", "a b"], "job name 'a b'", "use letters, digits"),
    (["jobs", "history", "j", "--limit", "0"], "'--limit': 0", "x>=1"),
    (["jobs", "pause", "a b"], "job name 'a b'", "use letters, digits"),
    (["jobs", "resume", "a b"], "job name 'a b'", "use letters, digits"),
    (["jobs", "delete", "a b"], "job name 'a b'", "use letters, digits"),
    (["jobs", "trigger", "a b"], "job name 'a b'", "use letters, digits"),
    (["owners", "a b"], "job name 'a b'", "use letters, digits"),
    (["members", "--max-offset", "-1"], "'--max-offset': -1.0", "x>=0"),
]


@pytest.mark.parametrize(("args", "named", "accepted"), CLI_CASES)
def test_the_cli_refuses_bad_input_before_reaching_zookeeper(
    args: list[str], named: str, accepted: str
) -> None:
    """Exit 2 with the reason; a command that had gone on would exit 3 here (nothing
    answers at the ZooKeeper given), so nothing was read or changed."""
    from click.testing import CliRunner

    from tools.zkserver import free_port
    from zksched.cli.main import cli

    nowhere = ["--zk", f"127.0.0.1:{free_port()}", "--connect-timeout", "0.5"]
    result = CliRunner().invoke(cli, [*nowhere, *args], catch_exceptions=False)  # last --zk wins
    said = result.output
    assert result.exit_code == 2, said
    assert "Traceback" not in said
    assert named in said and accepted in said, said


def test_a_job_file_names_the_job_the_field_and_what_is_accepted(tmp_path: Any) -> None:
    """`zksched check` and `jobs apply` share the decorator's validator; a few of its words
    as a job file gets them, with the line."""
    from click.testing import CliRunner

    from zksched.cli.main import cli

    jobs = tmp_path / "jobs.toml"
    jobs.write_text(
        '[jobs.nightly]\nschedule = "0 2 * * *"\ncommand = ["/bin/true"]\n'
        'timeout = "1 hour"\nretries = 11\ncolour = "blue"\n'
    )
    for command in (["check"], ["--zk", "127.0.0.1:1", "jobs", "apply"]):
        result = CliRunner().invoke(cli, [*command, str(jobs)])
        said = result.output
        assert result.exit_code == 2, said
        assert "job 'nightly', field 'timeout': invalid duration '1 hour'" in said
        assert "e.g. 500ms, 30s" in said
        assert "field 'retries': retries must be between 0 and 10, got 11" in said
        assert "field 'colour': unknown key" in said and "known keys: schedule, command" in said
