"""Fault-injection points for crash tests: `SKALD_FAULT=name` (or `name@N` for the Nth hit)
SIGKILLs the worker at that point. Unset, a point costs one dict lookup."""

from __future__ import annotations

import os
import signal

_SPEC = os.environ.get("SKALD_FAULT", "")
_NAME, _, _NTH = _SPEC.partition("@")
_hits = 0


def point(name: str) -> None:
    global _hits
    if not _NAME or name != _NAME:
        return
    _hits += 1
    if _hits >= int(_NTH or "1"):
        os.kill(os.getpid(), signal.SIGKILL)
