"""Job names and cluster ids (zksched/core/names.py): they become single znode path components,
so anything that could escape or confuse a path must be refused."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zksched.core.names import NAME_PATTERN, JobNames, is_valid_name, name_problem, parse_label

REFUSED = [
    pytest.param("../etc", id="parent-traversal"),
    pytest.param("a/b", id="slash"),
    pytest.param("", id="empty"),
    pytest.param("a" * 129, id="129-chars"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("jöb", id="unicode-letter"),
    pytest.param("ジョブ", id="unicode-cjk"),
    pytest.param("job\u200b", id="zero-width-space"),
    pytest.param("１job", id="fullwidth-digit"),
    pytest.param(".hidden", id="dot-hidden"),
    pytest.param(".", id="dot"),
    pytest.param("..", id="dotdot"),
    pytest.param("-rf", id="leading-dash"),
    pytest.param("_private", id="leading-underscore"),
    pytest.param("a b", id="space"),
    pytest.param("nightly\n", id="trailing-newline"),  # `$` alone would accept this
    pytest.param("a\\b", id="backslash"),
    pytest.param("zookeeper:x", id="colon"),
]

ACCEPTED = [
    pytest.param("a", id="one-char"),
    pytest.param("0", id="one-digit"),
    pytest.param("a" * 128, id="128-chars"),
    pytest.param("nightly-backup", id="dash"),
    pytest.param("backup.db-17", id="dot-inside"),
    pytest.param("Sync_Users.v2-x", id="mixed"),
    pytest.param("a..b", id="double-dot-inside"),
]


@pytest.mark.parametrize("value", REFUSED)
def test_unsafe_names_are_refused(value: str) -> None:
    problem = name_problem(value, "job name")
    assert problem is not None and problem.startswith("job name")
    assert not is_valid_name(value)


@pytest.mark.parametrize("value", ACCEPTED)
def test_safe_names_are_accepted(value: str) -> None:
    assert name_problem(value) is None
    assert is_valid_name(value)


def test_the_length_message_names_the_length_and_the_limit() -> None:
    assert name_problem("a" * 129) == "name is 129 characters long; the limit is 128"


@pytest.mark.parametrize("value", [None, 5, b"nightly", ["nightly"]])
def test_non_strings_are_refused_with_their_type(value: object) -> None:
    problem = name_problem(value, "client id")
    assert problem == f"client id must be a string, not {type(value).__name__}"
    assert not is_valid_name(value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=140))
def test_every_accepted_name_is_one_safe_path_component(value: str) -> None:
    if is_valid_name(value):
        assert 1 <= len(value) <= 128
        assert "/" not in value and "\x00" not in value
        assert value not in {".", ".."} and value[0].isascii() and value[0].isalnum()
        assert value.isascii() and value.isprintable()


@settings(max_examples=200, deadline=None)
@given(st.from_regex(re.compile(NAME_PATTERN), fullmatch=True))
def test_everything_the_documented_pattern_allows_is_accepted(value: str) -> None:
    # The pattern is quoted in SPEC.md; the checker must not be stricter than it.
    assert is_valid_name(value)


# --- labels (`--label KEY=VALUE`) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("role=db", ("role", "db")),
        ("zone=eu-west-1a", ("zone", "eu-west-1a")),
        ("expr=a=b", ("expr", "a=b")),  # only the first '=' separates
        ("tier=" + "x" * 256, ("tier", "x" * 256)),
        ("note=café", ("note", "café")),  # values are free text, keys are names
    ],
)
def test_labels_parse(text: str, expected: tuple[str, str]) -> None:
    assert parse_label(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("role", "KEY=VALUE"),
        ("=db", "must not be empty"),
        ("../x=1", "not allowed"),
        ("a/b=1", "not allowed"),
        ("rôle=db", "not allowed"),
        ("tier=" + "x" * 257, "at most 256"),
        ("role=d\nb", "printable"),
        ("role=d\x00b", "printable"),
        ("role=d\x7fb", "printable"),
    ],
)
def test_bad_labels_are_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_label(text)


@given(st.lists(st.sampled_from("abcdefg"), max_size=20))
def test_job_names_are_a_set_that_keeps_the_order_each_first_came_in(names: list[str]) -> None:
    found = JobNames(names)
    assert found == set(names) and len(found) == len(set(names))
    assert found.in_order == tuple(dict.fromkeys(names))
    assert (found & {"a"}) == ({"a"} & set(names))
