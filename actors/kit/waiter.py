"""A `Waiter` made of one future: the bus resolves it with the first event of its name."""

from __future__ import annotations

import asyncio


class FutureWaiter:
    """The first event of one name after it was opened, or None after a timeout."""

    def __init__(self) -> None:
        self.fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def wait(self, timeout_s: float) -> bytes | None:
        """The event's payload, or None when none came within `timeout_s`."""
        try:
            return await asyncio.wait_for(asyncio.shield(self.fut), timeout_s)
        except TimeoutError:
            return None
