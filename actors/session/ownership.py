"""One owner per session across session workers: a lease per session, requests forwarded to the
owner, one request at a time per session inside the owner."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import msgspec

from skald.actors.kit.lease import Leases
from skald.actors.kit.ports import Calls, LeaseStore
from skald.actors.kit.request import Ctx
from skald.messages.catalog import Op
from skald.messages.errors import Unavailable

T = TypeVar("T")
FORWARD_RETRY_S = 0.2  # a dead owner's lease expires within the TTL; until then, ask again this often


class OwnerBus(Calls, LeaseStore, Protocol):
    """The bus ports a session's ownership uses: a lease per session, and forwarding to its owner."""


class Ownership:
    """Which worker writes each session: a lease per session, and requests forwarded to the owner."""

    def __init__(self, bus: OwnerBus, worker_id: str, lease_ttl_s: float, on_lost: Callable[[str], None]) -> None:
        self.bus = bus
        self.leases = Leases(bus, worker_id, lease_ttl_s, on_lost=on_lost)
        self._locks: dict[str, asyncio.Lock] = {}
        self.forwards = 0

    def start(self) -> None:
        self.leases.start()

    async def stop(self) -> None:
        await self.leases.stop()

    def fence(self, key: str) -> None:
        """Before every durable write: refuse it if this worker's lease may have lapsed."""
        self.leases.check(key)

    @property
    def owned(self) -> int:
        return len(self.leases.held)

    async def run(self, op: Op, req: msgspec.Struct, ctx: Ctx, key: str, here: Callable[[], Awaitable[T]]) -> T | Any:
        """`here()` on this worker if it owns `key` (taking the lease when free), one at a time;
        otherwise the owner's answer to the forwarded request."""
        while True:
            owner = await self.leases.owner(key)
            if owner is None:
                async with self._locks.setdefault(key, asyncio.Lock()):
                    return await here()
            if ctx.forwarded:
                raise Unavailable("session owned by another worker; retry", {"owner": owner})
            try:
                self.forwards += 1
                ctx.relayed = True
                return await self.bus.forward(owner, op.name, req, ctx.identity, max(0.05, ctx.remaining() - 0.1))
            except Unavailable:
                if ctx.remaining() < 0.5:
                    raise
                await asyncio.sleep(FORWARD_RETRY_S)
