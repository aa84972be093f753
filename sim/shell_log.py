"""What the production shell logs while the simulator runs it.

Its warnings are the weather of a simulated cluster (replies lost, sessions expired) and
stay quiet; an exception it logs is a bug, of the shell or of the fire core (an illegal
transition raises in the core; the engine logs it and goes on, as a daemon must): each one
is kept, with the simulated time, and the run reports it as a violation.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from sim.world import EPOCH, World


class ShellErrors(logging.Handler):
    def __init__(self, world: World) -> None:
        super().__init__(logging.ERROR)
        self._world = world
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is None:
            return  # an error the shell expects (a trigger it could not hand back, say)
        _, error, _ = record.exc_info
        text = f"{record.getMessage()}: {type(error).__name__}: {error}"
        self.found.append(f"{text} at t+{self._world.t - EPOCH:.3f}s")
        self._world.note("shell", f"logged {text}")


@contextlib.contextmanager
def shell_errors(world: World) -> Iterator[ShellErrors]:
    """Keep the exceptions the shell logs meanwhile; its other messages go nowhere."""
    logger = logging.getLogger("zksched")
    handler = ShellErrors(world)
    saved = logger.level, logger.propagate
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
