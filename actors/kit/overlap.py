"""Overlapping waits: a model call with CPU work that does not need its answer, and blocking
reads of many items (each a round trip on the JetStream store) with one another."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
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


async def in_threads(fn: Callable[[T], U], items: Iterable[T], at_once: int) -> list[U]:
    """`fn` of each item, `at_once` of them in worker threads side by side, results in order: a
    blocking call that mostly waits on the store (a session's counters, its archives' markers)
    made for many items costs the round trips of a few, not of all."""
    gate = asyncio.Semaphore(at_once)

    async def one(item: T) -> U:
        async with gate:
            return await asyncio.to_thread(fn, item)

    return list(await asyncio.gather(*(one(i) for i in items)))
