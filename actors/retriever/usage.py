"""Use counts of indexed nodes (`active_count`): how often each was served in a context block or
reported used (`sessions.used`). The bus keeps one counter per node; every retriever replica
follows the counters, so hotness ranks by use on any replica, and a new replica starts from the
totals, not from zero."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from skald.actors.kit.ports import UsageLog

log = logging.getLogger("skald.retriever")
RESUBSCRIBE_S = 1.0  # after the bus lost the follower (a restart, a leader change)


class UsageCounts:
    """Every node's use count, followed from the use-counter stream, for hotness and reporting."""

    def __init__(self, bus: UsageLog) -> None:
        self.bus = bus
        self._counts: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.applied = 0  # counter updates seen (health)

    def apply(self, batch: list[tuple[str, str, int]]) -> None:
        for account, uri, total in batch:
            self._counts[f"{account}\x00{uri}"] = total
        self.applied += len(batch)

    def get(self, account: str, uri: str) -> int:
        """Uses of a node; a section's include its document's (a transcript used as a whole)."""
        n = self._counts.get(f"{account}\x00{uri}", 0)
        if "#" in uri:
            n += self._counts.get(f"{account}\x00{uri.partition('#')[0]}", 0)
        return n

    def __len__(self) -> int:
        return len(self._counts)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="usage-follow")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def _follow(self) -> None:
        while True:
            try:
                async for batch in self.bus.follow_usage():
                    self.apply(batch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - counts are best kept, never worth a dead replica
                log.warning("use counters: follower lost (%s: %s); resubscribing", type(e).__name__, e)
            await asyncio.sleep(RESUBSCRIBE_S)

    def health(self) -> dict[str, Any]:
        return {"nodes": len(self._counts), "updates": self.applied}
