"""Overlapping a model call with CPU work that does not need its answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
U = TypeVar("U")
HANDOFF_STEPS = 6  # loop steps given to the call first: enough for a pooled HTTP request to be written


async def overlapped(call: Awaitable[T], work: Callable[[], U]) -> tuple[T, U]:
    """`call`'s result and `work()`'s, with `work` done while `call` waits on the network (a find's
    keyword search runs during its query embedding). A cached answer costs nothing extra."""
    task = asyncio.ensure_future(call)
    for _ in range(HANDOFF_STEPS):
        if task.done():
            break
        await asyncio.sleep(0)
    try:
        done = work()
    except BaseException:
        task.cancel()
        raise
    return await task, done
