"""A run's output, logged line by line to the job logger within a byte budget (`_OutputLog`).

stdout and stderr are logged at most ``max_output_bytes`` per run (then one truncation
line); a line longer than `MAX_LINE_BYTES` is cut. The caller (the run's monitor) reads
the pipes to the end whatever is logged, so a chatty command never blocks on a full pipe.
"""

from __future__ import annotations

import logging

from zksched.runtime.run.request import RunRequest

# Longer lines are cut: one log record should stay readable and bounded.
MAX_LINE_BYTES = 4096


class _OutputLog:
    """Splits a run's output into lines and logs them, within the run's byte budget.

    Both streams share one budget; each has its own partial-line buffer."""

    def __init__(self, logger: logging.Logger, request: RunRequest, limit: int) -> None:
        self.logger = logger
        self.job = request.job
        self.fire_key = request.fire_key
        self.remaining = limit
        self.limit = limit
        self.truncated = False
        self._partial: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        # A stream inside an over-long line whose head was logged already: skip to its end.
        self._skipping: dict[str, bool] = {"stdout": False, "stderr": False}

    def feed(self, stream: str, data: bytes) -> None:
        if self.truncated:
            return  # still read (the caller drains the pipe), no longer split or logged
        partial = self._partial[stream]
        start = 0
        while not self.truncated:
            newline = data.find(b"\n", start)
            if newline < 0:
                if not self._skipping[stream]:
                    partial += data[start:]
                    if len(partial) > MAX_LINE_BYTES:
                        self._emit(stream, bytes(partial[:MAX_LINE_BYTES]), cut=True)
                        partial.clear()
                        self._skipping[stream] = True
                return
            if self._skipping[stream]:
                self._skipping[stream] = False
            else:
                partial += data[start:newline]
                line = bytes(partial)
                partial.clear()
                if len(line) > MAX_LINE_BYTES:
                    self._emit(stream, line[:MAX_LINE_BYTES], cut=True)
                else:
                    self._emit(stream, line, cut=False)
            start = newline + 1

    def close(self, stream: str) -> None:
        """End of the stream: log a last line that had no newline."""
        partial = self._partial[stream]
        if partial and not self.truncated and not self._skipping[stream]:
            self._emit(stream, bytes(partial), cut=False)
        partial.clear()

    def _emit(self, stream: str, line: bytes, *, cut: bool) -> None:
        # The newline counts too, so that endless empty lines are bounded as well.
        cost = len(line) + 1
        if cost > self.remaining:
            if self.remaining > 1:
                # No " [line cut]" here: the truncation line right after says it.
                self._log(stream, line[: self.remaining - 1], cut=False)
            self.remaining = 0
            self.truncated = True
            self.logger.info(
                "output truncated: more than %d bytes; the rest is not logged",
                self.limit,
                extra={
                    "event": "job-output-truncated",
                    "job": self.job,
                    "fire_key": self.fire_key,
                    "stream": stream,
                },
            )
            return
        self.remaining -= cost
        self._log(stream, line, cut=cut)

    def _log(self, stream: str, line: bytes, *, cut: bool) -> None:
        text = line.decode("utf-8", errors="replace").removesuffix("\r")
        if cut:
            text += " [line cut]"
        self.logger.info(
            "%s",
            text,
            extra={
                "event": "job-output",
                "job": self.job,
                "fire_key": self.fire_key,
                "stream": stream,
            },
        )
