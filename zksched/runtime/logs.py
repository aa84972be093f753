"""Logging to stderr: readable text by default, one JSON object a line with --log-format json."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from zksched.core.text import printable, printable_lines

# Attributes every LogRecord has; anything else was passed with `extra=` and is structured data.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    # What a log line quotes (a lock holder's tag, a command's output) may be hostile: the
    # message is one line whatever it holds (no forged lines), a traceback keeps its own.
    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        return printable_lines(super().format(record))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
            f".{int(record.msecs):03d}Z"
        )


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kazoo logs every failed connection attempt (our own "waiting" line says it once), and
    # at debug every packet it reads, znode data included (job env values, secrets): never.
    kazoo_level = logging.INFO if level.lower() == "debug" else logging.ERROR
    logging.getLogger("kazoo").setLevel(kazoo_level)
