"""Stopping a Cluster on SIGTERM (`Cluster.stop_on_signals`), then letting the signal do what
it did before: a deploy's SIGTERM hands the member's jobs and leadership over at once instead
of after a session timeout."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("zksched.app")


def stop_on_signals(stop: Callable[[], None], signals: tuple[int, ...]) -> None:
    """On each of `signals`, run `stop` on a thread of its own (never inside the handler,
    which may have interrupted the main thread anywhere), then send the signal again to the
    handler that was there before. Call from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "stop_on_signals() must be called from the main thread (Python installs "
            "signal handlers there only); or call stop() from your own handler"
        )
    for signum in signals:
        previous = signal.getsignal(signum)
        signal.signal(signum, _stop_on_signal(stop, previous))


def _stop_on_signal(
    stop: Callable[[], None], previous: Any
) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        log.info("signal %d: stopping (this member's jobs and leadership go at once)", signum)
        threading.Thread(
            target=_stop_then_resend, args=(stop, signum), name="zksched-signal-stop"
        ).start()

    return handler


def _stop_then_resend(stop: Callable[[], None], signum: int) -> None:
    try:
        stop()
    except Exception:
        log.exception("stopping on signal %d failed", signum)
    finally:
        os.kill(os.getpid(), signum)  # now handled as before the Cluster's handler
