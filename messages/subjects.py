"""How subjects are built from a prefix and a name. The prefix (`skald`) is configurable; the names of
operations and work queues are spelled in `catalog.py` only."""

from __future__ import annotations


def request(prefix: str, op: str) -> str:
    """Request subject of an operation: `skald.v1.search.find`."""
    return f"{prefix}.v1.{op}"


def internal(prefix: str, op: str) -> str:
    """Subject of an actor-to-actor operation: `skald.internal.search.candidates`."""
    return f"{prefix}.internal.{op}"


# JetStream names (streams are created by the runtime; subjects live under the prefix).
STREAM_WORK = "SKALD_WORK"
STREAM_INDEX = "SKALD_INDEX"
STREAM_EVENTS = "SKALD_EVENTS"


def work(prefix: str, queue: str) -> str:
    return f"{prefix}.work.{queue}"


def index_row(prefix: str, row_key: str) -> str:
    """One subject per index row, so the stream keeps exactly the latest state of each row."""
    return f"{prefix}.index.row.{row_key}"


def event(prefix: str, name: str) -> str:
    return f"{prefix}.evt.{name}"
