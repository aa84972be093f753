"""The daemon config file: schema checks (pure), `zksched config check`, and precedence."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from zksched.cli.main import cli
from zksched.core.config import ConfigError, parse_config
from zksched.zk.connection import parse_connect_string

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "zksched.toml"

FULL = """\
zk = "zk1:2181,zk2:2181/zksched"
client_id = "prod"
auth = "zksched:s3cret"
tls = true
tls_ca = "/etc/zksched/ca.pem"
tls_cert = "/etc/zksched/client.pem"
tls_key = "/etc/zksched/client.key"
tls_check_hostname = true
connect_timeout = "5s"
log_level = "info"
log_format = "json"

[run]
labels = { role = "db", dc = "eu-1" }
session_timeout = 10
member_id = "db-1"
concurrency = 16
on_session_loss = "continue"
stop_grace = "45s"
http = "127.0.0.1:9180"
allowed_commands = ["/usr/local/bin/*", "/usr/bin/backup"]
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "z.toml", check_connect_string=parse_connect_string)
    return [str(p) for p in caught.value.problems]


def test_every_key_is_read_into_click_ready_values() -> None:
    config = parse_config(FULL, "z.toml", check_connect_string=parse_connect_string)
    assert config.options == {
        "zk": "zk1:2181,zk2:2181/zksched",
        "client_id": "prod",
        "auth": "zksched:s3cret",
        "tls": True,
        "tls_ca": "/etc/zksched/ca.pem",
        "tls_cert": "/etc/zksched/client.pem",
        "tls_key": "/etc/zksched/client.key",
        "tls_check_hostname": True,
        "connect_timeout": 5.0,
        "log_level": "info",
        "log_format": "json",
    }
    assert config.run == {
        "labels": ["role=db", "dc=eu-1"],
        "session_timeout": 10.0,
        "member_id": "db-1",
        "concurrency": 16,
        "on_session_loss": "continue",
        "stop_grace": 45.0,
        "http": "127.0.0.1:9180",
        "allowed_commands": ["/usr/local/bin/*", "/usr/bin/backup"],
    }
    assert config.default_map()["run"]["concurrency"] == 16


def test_an_empty_file_is_valid_and_sets_nothing() -> None:
    config = parse_config("", "z.toml")
    assert config.default_map() == {}


def test_dashed_keys_are_accepted_like_the_flags() -> None:
    config = parse_config('client-id = "a"\n[run]\nstop-grace = 5\n', "z.toml")
    assert config.options == {"client_id": "a"}
    assert config.run == {"stop_grace": 5.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('zk = ""', r"z.toml:1: zk: must not be empty"),
        ('zk = "h1:99999"', r"z.toml:1: zk: invalid port 99999"),
        ('zk = "h1:2181/../x"', r"z.toml:1: zk: invalid chroot"),
        ("zk = 2181", r"z.toml:1: zk: must be a string, not an integer"),
        ('client_id = "a/b"', r"z.toml:1: client_id: client_id 'a/b' is not allowed"),
        ('auth = "nopassword"', r"z.toml:1: auth: must be \"USER:PASSWORD\""),
        ('tls = "yes"', r"z.toml:1: tls: must be true or false, not a string"),
        ("connect_timeout = 0", r"z.toml:1: connect_timeout: 0s is out of range"),
        ('connect_timeout = "soon"', r"z.toml:1: connect_timeout: invalid duration 'soon'"),
        ('log_level = "loud"', r"z.toml:1: log_level: must be one of debug, info"),
        ("colour = true", r"z.toml:1: colour: unknown key \(known keys: auth,"),
        ("run = 3", r"z.toml:1: run: must be a table"),
        ("[run]\nconcurrency = 0", r"z.toml:2: run.concurrency: 0 is out of range \(1 to 4096\)"),
        ("[run]\nconcurrency = 1.5", r"z.toml:2: run.concurrency: must be an integer, not a float"),
        ("[run]\nsession_timeout = 0.5", r"z.toml:2: run.session_timeout: 0.5s is out of range"),
        ("[run]\nsession_timeout = true", r"run.session_timeout: must be a number of seconds"),
        ('[run]\non_session_loss = "ignore"', r"run.on_session_loss: must be one of terminate"),
        ("[run]\nstop_grace = -1", r"z.toml:2: run.stop_grace: -1s is out of range"),
        ('[run]\nhttp = "localhost"', r"z.toml:2: run.http: must be a listen address"),
        ('[run]\nhttp = "[::1:80"', r"z.toml:2: run.http: has an unbalanced IPv6 bracket"),
        ("[run]\nallowed_commands = []", r"run.allowed_commands: is empty, which would refuse"),
        ('[run]\nallowed_commands = "/bin/*"', r"run.allowed_commands: must be an array"),
        ('[run]\nallowed_commands = ["/a", ""]', r"run.allowed_commands: pattern #2 is empty"),
        ("[run]\nallowed_commands = [1]", r"run.allowed_commands: pattern #1 must be a string"),
        (
            '[run]\nallowed_commands = ["/a/*", "sh"]',
            r"run.allowed_commands: pattern #2: 'sh' is not an absolute path",
        ),
        ('[run]\nlabels = ["role=db"]', r"z.toml:2: run.labels: must be a table"),
        ('[run]\nlabels = { "a/b" = "x" }', r"run.labels: label key 'a/b' is not allowed"),
        ("[run]\nlabels = { role = 1 }", r"run.labels: label 'role' must be a string"),
        ('[run]\nmember_id = ".."', r"run.member_id: member_id '..' is not allowed"),
        ("[run]\nwhatever = 1", r"z.toml:2: run.whatever: unknown key \(known keys: allowed_"),
        ("[members]\nx = 1", r"z.toml:1: members: unknown key"),
        (
            'tls_cert = "/c.pem"\ntls = true',
            r"z.toml:1: tls_cert: tls_cert and tls_key go together",
        ),
        ('tls_ca = "/ca.pem"', r"z.toml:1: tls_ca: is set but tls is not true"),
        ('client_id = "a"\nclient-id = "b"', r"z.toml:2: client-id: given twice"),
        ("zk = [", r"z.toml:1: invalid TOML: "),
    ],
)
def test_each_bad_key_is_named_with_its_line(text: str, expected: str) -> None:
    problems = problems_of(text)
    assert any(re.search(expected, p) for p in problems), problems


def test_every_problem_is_reported_not_only_the_first() -> None:
    text = 'log_format = "xml"\ncolour = 1\n[run]\nconcurrency = 0\nstop_grace = "x"\n'
    problems = problems_of(text)
    assert [p.split(": ")[1] for p in problems] == [
        "log_format",
        "colour",
        "run.concurrency",
        "run.stop_grace",
    ]


def test_non_utf8_and_oversized_files_are_refused() -> None:
    with pytest.raises(ConfigError, match="not UTF-8"):
        parse_config(b"zk = '\xff'", "z.toml")
    with pytest.raises(ConfigError, match="larger than"):
        parse_config(b"#" * 1_000_001, "z.toml")


def test_the_shipped_example_is_valid() -> None:
    config = parse_config(EXAMPLE.read_bytes(), str(EXAMPLE), parse_connect_string)
    assert config.run["allowed_commands"]
    assert "http" in config.run


# -- the CLI --------------------------------------------------------------------------------


def zksched(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZKSCHED_")}
    return subprocess.run(
        [sys.executable, "-m", "zksched", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_config_check_accepts_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "z.toml"
    path.write_text(FULL)
    path.chmod(0o600)
    done = zksched("config", "check", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}: OK (19 keys set)"
    assert done.stderr == ""


def test_config_check_warns_when_a_credential_is_readable_by_others(tmp_path: Path) -> None:
    path = tmp_path / "z.toml"
    path.write_text(FULL)
    path.chmod(0o644)
    done = zksched("config", "check", str(path))
    assert done.returncode == 0
    assert "readable by group or others; chmod 600" in done.stderr


def test_config_check_refuses_a_bad_file_with_exit_2_naming_every_key(tmp_path: Path) -> None:
    path = tmp_path / "z.toml"
    path.write_text('zk = "h:1"\n[run]\nconcurrency = "many"\non_session_loss = "panic"\n')
    done = zksched("config", "check", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"{path}:3: run.concurrency: must be an integer")
    assert lines[1].startswith(f"{path}:4: run.on_session_loss: must be one of")
    assert lines[-1] == f"zksched: {path}: 2 problems found"
    assert "Traceback" not in done.stderr


def test_a_missing_file_is_exit_2(tmp_path: Path) -> None:
    done = zksched("config", "check", str(tmp_path / "nope.toml"))
    assert done.returncode == 2
    assert "the file does not exist" in done.stderr


def test_other_commands_refuse_to_start_with_a_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "z.toml"
    path.write_text("[run]\nconcurrency = 0\nstop_grace = -1\n")
    done = zksched("--config", str(path), "next", "@daily")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"zksched: config file {path}:2: run.concurrency: 0 is out of range (1 to 4096)"
        f" (and 1 more: run `zksched config check {path}`)"
    )
    # ...and the same through ZKSCHED_CONFIG
    done = zksched("next", "@daily", env={"ZKSCHED_CONFIG": str(path)})
    assert done.returncode == 2 and "run.concurrency" in done.stderr


def test_precedence_flags_beat_env_beat_file(tmp_path: Path) -> None:
    # The connect string is what an unreachable-ZooKeeper message names: a real, observable
    # outcome of option resolution (ports 1..3 refuse connections at once).
    path = tmp_path / "z.toml"
    path.write_text('zk = "127.0.0.1:1"\nconnect_timeout = "0.5s"\n')
    from_file = zksched("--config", str(path), "members")
    from_env = zksched("--config", str(path), "members", env={"ZKSCHED_ZK": "127.0.0.1:2"})
    from_flag = zksched(
        "--config", str(path), "--zk", "127.0.0.1:3", "members", env={"ZKSCHED_ZK": "127.0.0.1:2"}
    )
    assert from_file.returncode == from_env.returncode == from_flag.returncode == 3
    assert "cannot reach ZooKeeper at 127.0.0.1:1 within 0.5s" in from_file.stderr
    assert "cannot reach ZooKeeper at 127.0.0.1:2 within 0.5s" in from_env.stderr
    assert "cannot reach ZooKeeper at 127.0.0.1:3 within 0.5s" in from_flag.stderr


def test_run_options_come_from_the_run_table(tmp_path: Path) -> None:
    # click shows the resolved default (from the file) in --help: no daemon needs to start.
    path = tmp_path / "z.toml"
    path.write_text(
        '[run]\nconcurrency = 7\nsession_timeout = "12s"\non_session_loss = "continue"\n'
    )
    result = CliRunner().invoke(cli, ["--config", str(path), "run", "--help"], env={})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "[default: 7; 1<=x<=4096]" in text
    assert "[default: 12.0]" in text
    assert "[default: continue]" in text


def test_version_prints_the_package_version() -> None:
    from zksched import __version__

    done = zksched("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"zksched, version {__version__}"
