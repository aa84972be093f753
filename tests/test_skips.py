from __future__ import annotations

import logging

import pytest

from zksched.runtime.skips import SkipLog


def test_skips_are_counted_by_reason_and_job(caplog: pytest.LogCaptureFixture) -> None:
    skips = SkipLog()
    with caplog.at_level(logging.INFO, logger="zksched.skips"):
        skips.skip("a", "paused")
        skips.skip("a", "paused")
        skips.skip("b", "already-claimed", count=3)
    assert skips.counts == {"paused": 2, "already-claimed": 3}
    assert skips.by_job[("a", "paused")] == 2
    # logged without flooding: the first of each (job, reason) only, within the quiet period
    assert len([r for r in caplog.records if getattr(r, "reason", None) == "paused"]) == 1


def test_a_summary_follows_the_quiet_period(caplog: pytest.LogCaptureFixture) -> None:
    skips = SkipLog(quiet_period=0.0)
    with caplog.at_level(logging.INFO, logger="zksched.skips"):
        skips.skip("a", "not-connected")
        skips.skip("a", "not-connected")
    assert len(caplog.records) == 2


def test_unknown_reason_is_a_bug() -> None:
    with pytest.raises(ValueError):
        SkipLog().skip("a", "felt-like-it")


def test_listeners_see_every_skip() -> None:
    seen: list[tuple[str, str, int]] = []
    skips = SkipLog()
    skips.listeners.append(lambda job, reason, n: seen.append((job, reason, n)))
    skips.skip("a", "still-running")
    assert seen == [("a", "still-running", 1)]
