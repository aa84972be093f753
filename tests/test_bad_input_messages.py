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
