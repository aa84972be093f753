"""One rendered body shared by every request (zksched/runtime/status/rendered.py)."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zksched.runtime.status.rendered import SharedRender, next_warm_render, refresh_every

WARM = {"max_age": 1.0, "stale_max": 5.0, "keep_warm": 300.0, "cpu_share": 0.02}


class Renders:
    """A render function that counts its calls and can be held up."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> bytes:
        with self._lock:
            self.calls += 1
            n = self.calls
        self.started.set()
        self.release.wait(10)
        return f"body {n}".encode()


def wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def on_fake_clock(renders: Renders) -> tuple[SharedRender, list[float]]:
    """max_age 1 s, stale_max 5 s, no keep-warm, on a clock the test moves (now[0])."""
    now = [100.0]
    return SharedRender("t", renders, max_age=1.0, stale_max=5.0, clock=lambda: now[0]), now


def test_a_fresh_body_is_served_without_rendering_again() -> None:
    renders = Renders()
    shared, now = on_fake_clock(renders)
    assert shared.get() == b"body 1"
    now[0] += 1.0
    assert shared.get() == b"body 1"
    assert renders.calls == 1


def test_a_stale_body_is_served_at_once_while_one_new_render_runs_on_the_side() -> None:
    renders = Renders()
    shared, now = on_fake_clock(renders)
    assert shared.get() == b"body 1"
    now[0] += 3.0
    renders.release.clear()  # the render on the side is held up
    assert shared.get() == b"body 1"  # served without waiting for it
    wait_for(lambda: renders.calls == 2)
    assert shared.get() == b"body 1"  # a second request starts no second render
    renders.release.set()
    wait_for(lambda: shared.get() == b"body 2")
    assert renders.calls == 2


def test_a_body_older_than_stale_max_is_rendered_before_answering() -> None:
    renders = Renders()
    shared, now = on_fake_clock(renders)
    shared.get()
    now[0] += 5.5
    assert shared.get() == b"body 2"


def test_concurrent_first_requests_share_one_render() -> None:
    renders = Renders()
    renders.release.clear()
    shared = SharedRender("t", renders, max_age=1.0, stale_max=5.0)
    got: list[bytes] = []
    threads = [threading.Thread(target=lambda: got.append(shared.get())) for _ in range(8)]
    for t in threads:
        t.start()
    renders.started.wait(10)
    renders.release.set()
    for t in threads:
        t.join(10)
    assert got == [b"body 1"] * 8
    assert renders.calls == 1


def test_a_failed_render_fails_that_request_and_the_next_one_renders_again() -> None:
    calls = [0]

    def flaky() -> bytes:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("boom")
        return b"ok"

    shared = SharedRender("t", flaky, max_age=1.0, stale_max=5.0)
    try:
        shared.get()
        raise AssertionError("the failure was swallowed")
    except RuntimeError:
        pass
    assert shared.get() == b"ok"


def test_keep_warm_renders_each_max_age_while_asked_and_stops_after() -> None:
    renders = Renders()
    # keep_warm is long enough for four renders on a loaded machine (0.3 s was not)
    shared = SharedRender("t", renders, max_age=0.05, stale_max=5.0, keep_warm=2.0, cpu_share=1.0)
    shared.get()
    wait_for(lambda: renders.calls >= 4)  # no request needed for these
    # nobody asks any more: after keep_warm the thread stops, and so do the renders
    wait_for(lambda: shared._warmer is None)
    stopped_at = renders.calls
    time.sleep(0.3)
    assert renders.calls == stopped_at
    shared.get()  # a new request starts keeping warm again
    wait_for(lambda: renders.calls >= stopped_at + 3)
    shared.close()
    wait_for(lambda: shared._warmer is None or not shared._warmer.is_alive())


def test_without_keep_warm_nothing_renders_between_requests() -> None:
    renders = Renders()
    shared = SharedRender("t", renders, max_age=0.01, stale_max=5.0)
    shared.get()
    time.sleep(0.2)
    assert renders.calls == 1


def test_the_next_warm_render_is_due_each_max_age_after_the_last() -> None:
    due = next_warm_render(110.0, rendered_at=109.5, asked_at=100.0, cost=0.013, **WARM)
    assert due == 110.5


def test_keeping_warm_stops_when_nobody_asked_for_keep_warm_seconds() -> None:
    assert next_warm_render(400.0, 399.5, asked_at=100.0, cost=0.01, **WARM) == 400.5
    assert next_warm_render(400.1, 399.5, asked_at=100.0, cost=0.01, **WARM) is None


def test_costly_renders_are_spaced_to_the_cpu_share_or_left_to_requests() -> None:
    # 13 ms at 2 %: every 0.65 s would do, but never more often than max_age
    assert refresh_every(1.0, 0.013, 0.02) == 1.0
    # 60 ms at 2 %: every 3 s
    assert next_warm_render(10.0, 9.0, asked_at=9.0, cost=0.06, **WARM) == 12.0
    # 200 ms at 2 % would be every 10 s, past stale_max: no point, requests render
    assert next_warm_render(10.0, 9.0, asked_at=9.0, cost=0.2, **WARM) is None


@given(
    cost=st.floats(0, 10),
    share=st.floats(0.001, 1),
    max_age=st.floats(0.01, 10),
    since_render=st.floats(0, 100),
    since_asked=st.floats(0, 1000),
)
def test_keep_warm_never_takes_more_than_its_cpu_share(
    cost: float, share: float, max_age: float, since_render: float, since_asked: float
) -> None:
    now = 5000.0
    due = next_warm_render(
        now,
        now - since_render,
        now - since_asked,
        cost,
        max_age=max_age,
        stale_max=max_age * 5,
        keep_warm=300.0,
        cpu_share=share,
    )
    if due is None:
        assert since_asked > 300.0 or cost / share > max_age * 5
    else:
        gap = due - (now - since_render)  # float subtraction: compare within rounding
        assert gap >= max_age * (1 - 1e-9)
        assert cost <= share * gap * (1 + 1e-9)


def test_a_failing_publish_is_logged_once_and_the_body_still_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared, now = on_fake_clock(Renders())

    def publish(body: bytes, at: float) -> None:
        raise OSError("no space left")

    shared.on_rendered = publish
    for _ in range(3):
        now[0] += 10.0  # past stale_max: rendered (and published) on each request
        assert shared.get().startswith(b"body")
    assert [r.getMessage() for r in caplog.records] == ["publishing t failed"]


def test_close_stops_publishing() -> None:
    published: list[bytes] = []
    shared, now = on_fake_clock(Renders())
    shared.on_rendered = lambda body, at: published.append(body)
    shared.get()
    shared.close()
    now[0] += 10.0
    shared.get()
    assert published == [b"body 1"]


def test_no_keep_warm_thread_when_a_render_costs_too_much() -> None:
    def costly() -> bytes:
        deadline = time.thread_time() + 0.03  # 30 ms of CPU: over 2 % of 1 s
        while time.thread_time() < deadline:
            pass
        return b"x"

    shared = SharedRender("t", costly, max_age=0.1, stale_max=1.0, keep_warm=60, cpu_share=0.02)
    shared.get()  # no cost known yet: keeping warm starts, then stops after this render
    wait_for(lambda: shared._warmer is None)
    shared.get()
    assert shared._warmer is None
