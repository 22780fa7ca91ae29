"""Work a session request does after its reply (a commit's tidy-up), one at a time per session.

The session's next request waits for it (`settle`), so nothing it does can interleave with a
later write of the same session; a failure calls `on_failure` (the owner then reads the session
from disk again, and load finishes the work).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("skald.session")
Work = Callable[[], Awaitable[None]]  # what a request does after its reply


class Tails:
    """The background step a request leaves behind (Phase 2 waiting, a root rewrite), one per session, run before
    its next request."""

    def __init__(self, on_failure: Callable[[str], None]) -> None:
        self.on_failure = on_failure
        self._running: dict[str, asyncio.Task[None]] = {}
        self.failed = 0

    def after(self, key: str, work: Work) -> None:
        """Start `work` now (the reply is on its way); the caller holds the session, so nothing
        else of it is running."""
        async def run() -> None:
            try:
                await work()
            except Exception as e:  # noqa: BLE001 - the request was answered; the disk is repaired on load
                self.failed += 1
                log.warning("after-reply work of session key %s failed (%s); reloading it from disk", key, e)
                self.on_failure(key)

        task = asyncio.create_task(run(), name=f"session-tail-{key}")
        self._running[key] = task
        task.add_done_callback(lambda t: self._running.pop(key, None) if self._running.get(key) is t else None)

    async def settle(self, key: str) -> None:
        """Until the session's after-reply work is done (never raises; a cancelled waiter leaves
        the work running)."""
        task = self._running.get(key)
        if task is not None:
            await asyncio.shield(task)

    async def drain(self) -> None:
        await asyncio.gather(*self._running.values())
