"""A private event loop on a daemon thread, for blocking code built on async libraries: the
JetStream tree (the storage port is blocking, nats-py is not) and the client for code without a
loop. Closing it ends what is still in flight, so a call from another thread never waits out its
timeout on a stopped loop and no task is left pending as the loop goes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CLOSE_WAIT_S = 5.0  # for the calls in flight to end once cancelled, and for the thread to stop


class LoopClosed(RuntimeError):
    """A call made, or still waiting, when the loop closed."""


class LoopThread:
    """`run(coro)` from any thread other than the loop's; `close()` once."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self.closed = False

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """The coroutine's result on the loop; LoopClosed once `close` has begun."""
        if self.closed:
            coro.close()
            raise LoopClosed("closed")
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)
        except concurrent.futures.CancelledError as e:
            if self.closed:
                raise LoopClosed("closed during the call") from e
            raise

    def close(self) -> None:
        """Cancel what is in flight, wait for it to end, stop the loop and its thread."""
        self.closed = True
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self.loop).result(CLOSE_WAIT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=CLOSE_WAIT_S)


async def _cancel_the_rest() -> None:
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
