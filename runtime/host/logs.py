"""Logs of a worker: readable text by default, JSON lines when asked (`SKALD_LOG_FORMAT=json`,
python-json-logger, BSD), at `SKALD_LOG_LEVEL`. Every answered request that failed is one line with
the worker, operation, account, reply code and duration; successful ones at DEBUG."""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS = ("worker", "op", "account", "code", "duration_ms")


class _Text(logging.Formatter):
    """Text lines with the request fields appended when a record carries them."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={getattr(record, k)}" for k in FIELDS if hasattr(record, k))
        return f"{line} {extra}" if extra else line


def configure(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                           rename_fields={"levelname": "level", "name": "logger"}))
    else:
        handler.setFormatter(_Text(TEXT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
