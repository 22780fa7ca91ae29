"""The request clock: what "now" is while a request runs, and a request-derived id.

The host sets both for every request: the time it accepted it (or, on a replay, the time the
original was accepted, from the `Skald-Clock` header) and an id derived from the request's
content and that time. Handlers stamp with `now()` and name jobs and sessions with
`request_id()`, so replaying the same requests at the same clock rebuilds the same state.
Outside a request (background work, tests) they fall back to the wall clock and a random id.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from contextvars import ContextVar

NOW: ContextVar[float | None] = ContextVar("skald_now", default=None)
REQUEST_KEY: ContextVar[str | None] = ContextVar("skald_request_key", default=None)


def now() -> float:
    at = NOW.get()
    return time.time() if at is None else at


def request_id(salt: str = "") -> str:
    key = REQUEST_KEY.get()
    if key is None:
        return uuid.uuid4().hex
    return hashlib.sha1(f"{key}|{salt}".encode()).hexdigest()[:32]
