"""A rendered HTTP body shared by every request, so a request never waits for a render.

Rendering `/metrics` or the status page costs the daemon milliseconds to tens of
milliseconds of CPU (more with thousands of jobs), and while the daemon starts a burst of
commands a render that must share the interpreter lock takes several times that in wall
time: a scrape that waited for its render took up to 58 ms in a 2,000-job burst
(docs/benchmarks.md, http). So each body is rendered once and shared:

- a body at most `max_age` old is served as it is;
- one at most `stale_max` old is served too, while a new one renders on the side;
- an older one (or none yet) is rendered first, by one request while the others wait for
  it and then share it (single flight);
- with `keep_warm`, the body is re-rendered every `max_age` on a thread of its own for as
  long as requests keep coming (the last one at most `keep_warm` ago), so that a scraper
  polling every 15 s finds a body less than about a second old instead of one it must wait
  for. Those renders are capped at `cpu_share` of a core: when one render costs more than
  `cpu_share * stale_max` of CPU time, keeping warm would not keep a body fresh enough to
  serve, and requests render on demand again.

`on_rendered` publishes each new body elsewhere (the HTTP child process serves copies of
them, `probes.py`), and `touch()` tells it that such a copy was served, which counts as a
request here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def refresh_every(max_age: float, cost: float, cpu_share: float) -> float:
    """Seconds between two keep-warm renders: every `max_age`, or rarer when one render's
    CPU cost (`cost`, seconds) would otherwise take more than `cpu_share` of a core."""
    return max(max_age, cost / cpu_share)


def worth_keeping_warm(max_age: float, cost: float, cpu_share: float, stale_max: float) -> bool:
    """Whether renders at `cpu_share` can keep the body within `stale_max`; if not,
    requests render on demand instead."""
    return refresh_every(max_age, cost, cpu_share) <= stale_max


def next_warm_render(
    now: float,
    rendered_at: float,
    asked_at: float,
    cost: float,
    *,
    max_age: float,
    stale_max: float,
    keep_warm: float,
    cpu_share: float,
) -> float | None:
    """When the keep-warm thread should render next (a monotonic time, maybe `now` or
    earlier), or None when it should stop: nobody asked for `keep_warm`, or a render is so
    costly that the body could not be kept within `stale_max` at `cpu_share`."""
    if now - asked_at > keep_warm or not worth_keeping_warm(max_age, cost, cpu_share, stale_max):
        return None
    return rendered_at + refresh_every(max_age, cost, cpu_share)


class SharedRender:
    """One body (`render()`'s bytes) shared by every request; see the module docstring."""

    def __init__(
        self,
        name: str,
        render: Callable[[], bytes],
        *,
        max_age: float,
        stale_max: float,
        keep_warm: float = 0.0,
        cpu_share: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._render_fn = render
        self.max_age = max_age
        self.stale_max = stale_max
        self.keep_warm = keep_warm
        self.cpu_share = cpu_share
        self._clock = clock
        self._lock = threading.Lock()  # guards the fields below
        self._body = b""
        self._at = -math.inf  # when the served body's render began (its data are that old)
        self._cost = 0.0  # CPU seconds the last render took
        self._asked = -math.inf
        self._aside = False  # a render on the side is under way
        self._warmer: threading.Thread | None = None
        self._render_lock = threading.Lock()  # one render at a time
        self._closed = threading.Event()
        self._poke = threading.Event()  # wakes the keep-warm thread early (close)
        # Called with each new body and the monotonic time its render began (under the
        # render lock, so calls never overlap): to publish a copy elsewhere.
        self.on_rendered: Callable[[bytes, float], None] | None = None
        self._publish_failing = False

    def get(self) -> bytes:
        """The body to serve now: shared, or rendered first when none is recent enough."""
        body = self._ask()
        if body is not None:
            return body
        with self._render_lock:  # the others wait here, then share what the first rendered
            with self._lock:
                if self._clock() - self._at <= self.max_age:
                    return self._body
            return self._render()

    def touch(self) -> None:
        """Someone asked for the body elsewhere (a published copy was served): keep it as
        fresh as `get` would, without waiting for a render."""
        if self._ask() is None:
            with self._lock:
                self._start_aside()

    def _ask(self) -> bytes | None:
        """Note the request; the body if it may be served now (after starting a render on
        the side when it is past max_age), None when it must be rendered first."""
        now = self._clock()
        with self._lock:
            self._asked = now
            self._start_warmer()
            age = now - self._at
            if age <= self.max_age:
                return self._body
            if age <= self.stale_max:
                self._start_aside()
                return self._body
        return None

    def _start_aside(self) -> None:
        """Start one render on the side unless one is under way (the caller holds _lock).
        No thread to be had: no render on the side this time, the next request tries again."""
        if not self._aside:
            thread = threading.Thread(
                target=self._render_aside, name=f"zksched-render-{self.name}", daemon=True
            )
            with contextlib.suppress(RuntimeError):
                thread.start()
                self._aside = True

    def _start_warmer(self) -> None:
        """Start keeping warm if asked to, not yet doing so, and a render is cheap enough to
        be kept within stale_max (the caller holds _lock)."""
        if (
            self.keep_warm <= 0
            or self._warmer is not None
            or self._closed.is_set()
            or not worth_keeping_warm(self.max_age, self._cost, self.cpu_share, self.stale_max)
        ):
            return
        thread = threading.Thread(
            target=self._keep_warm, name=f"zksched-warm-{self.name}", daemon=True
        )
        with contextlib.suppress(RuntimeError):
            thread.start()
            self._warmer = thread

    def close(self, timeout: float = 5.0) -> None:
        """Stop keeping warm and publishing, after the render under way if any (the body
        stays servable here)."""
        self._closed.set()
        self._poke.set()
        self.on_rendered = None
        if self._render_lock.acquire(timeout=timeout):
            self._render_lock.release()

    def _render(self) -> bytes:
        """Render now; the caller holds _render_lock."""
        at, cpu = self._clock(), time.thread_time()
        body = self._render_fn()
        cost = time.thread_time() - cpu
        with self._lock:
            self._body, self._at, self._cost = body, at, cost
        publish = self.on_rendered
        if publish is not None:
            try:
                publish(body, at)
                self._publish_failing = False
            except Exception:  # the body is still served here; only its copy is missing
                if not self._publish_failing:  # once, not every second
                    log.warning("publishing %s failed", self.name, exc_info=True)
                self._publish_failing = True
        return body

    def _render_if_older(self, than: float) -> None:
        with self._render_lock:
            with self._lock:
                if self._clock() - self._at < than:
                    return  # rendered meanwhile by someone else
            self._render()

    def _render_aside(self) -> None:
        try:
            self._render_if_older(self.max_age)
        except Exception:
            log.exception("rendering %s failed", self.name)
        finally:
            with self._lock:
                self._aside = False

    def _keep_warm(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                now = self._clock()
                due = next_warm_render(
                    now,
                    self._at,
                    self._asked,
                    self._cost,
                    max_age=self.max_age,
                    stale_max=self.stale_max,
                    keep_warm=self.keep_warm,
                    cpu_share=self.cpu_share,
                )
                if due is None:
                    self._warmer = None  # the next request starts a new one
                    return
                every = refresh_every(self.max_age, self._cost, self.cpu_share)
            if due > now:
                self._poke.wait(due - now)
                self._poke.clear()
                continue
            try:
                self._render_if_older(every)
            except Exception:
                log.exception("rendering %s failed", self.name)
                self._closed.wait(self.max_age)
