"""When a starting member may create its node (runtime/membership/join_hold.py)."""

from __future__ import annotations

import time

import pytest

from zksched.core.members import Member
from zksched.runtime.membership.join_hold import JoinHold

ME, OTHER = Member("me-1"), Member("other-2", znode="other-2.0000000001")


def test_no_limit_means_no_hold() -> None:
    assert JoinHold("me-1", None).may_join([OTHER])


def test_held_while_others_run_until_released_once() -> None:
    hold = JoinHold("me-1", 60)
    assert not hold.may_join([OTHER])
    assert hold.release() and not hold.release()
    assert hold.may_join([OTHER])


def test_nobody_else_there_means_join_at_once() -> None:
    hold = JoinHold("me-1", 60)
    assert hold.may_join([])
    assert hold.may_join([replace_znode(ME)])  # a stale node of our own id is nobody else
    assert hold.may_join([OTHER])  # and it stays allowed


def replace_znode(member: Member) -> Member:
    return Member(member.member_id, znode=f"{member.member_id}.0000000007")


def test_the_limit_counts_from_the_first_waiting_view(caplog: pytest.LogCaptureFixture) -> None:
    hold = JoinHold("me-1", 5)
    now = time.monotonic()
    assert not hold.overdue(now + 100)  # not waiting yet: no limit runs
    hold.waiting()
    hold.waiting()  # the first counts
    assert not hold.overdue(now + 1)
    assert hold.overdue(time.monotonic() + 5.1)
    assert [r.event for r in caplog.records] == ["join-unready"]  # type: ignore[attr-defined]
    assert not hold.overdue(time.monotonic() + 10)  # said once
    assert hold.may_join([OTHER])


def test_the_limit_counts_again_from_the_job_table_once() -> None:
    """A million jobs take longer than the limit to read: the weighing of a table that came
    is waited for; a table read again later does not push the limit back again."""
    hold = JoinHold("me-1", 5)
    hold.waiting()
    first_limit = time.monotonic() + 5
    time.sleep(0.3)
    hold.table_read()
    start = time.monotonic()
    assert not hold.overdue(first_limit + 0.2)  # past the first view's limit, not the table's
    hold.table_read()  # a newer generation: the limit stays
    assert hold.overdue(start + 5.1)
