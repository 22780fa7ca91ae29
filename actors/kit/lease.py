"""One writer per session across workers: a lease per session in a JetStream KV bucket.

The owner keeps its lease alive by compare-and-set renewals; a dead owner's lease expires with
the bucket's TTL and the next worker to see the session takes it. Before every durable write
the owner checks that its lease is still fresh (fencing): a worker that could not renew in
time stops writing instead of racing the new owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from skald.actors.kit.ports import LeaseStore
from skald.messages.errors import Unavailable

SAFETY = 0.5  # of the TTL: writes stop this long before a lease could expire


@dataclass(slots=True)
class Held:
    """A lease this worker holds: its revision and when it was last renewed and used."""

    rev: int
    renewed_at: float
    used_at: float


class Leases:
    """One writer per key across workers: leases taken, renewed in the background while in use, released when idle."""

    def __init__(self, bus: LeaseStore, worker_id: str, ttl_s: float, idle_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, on_lost: Callable[[str], None] | None = None) -> None:
        self.bus = bus
        self.worker_id = worker_id
        self.ttl_s = ttl_s
        self.idle_s = idle_s
        self.clock = clock
        self.on_lost = on_lost
        self.held: dict[str, Held] = {}
        self._task: asyncio.Task[None] | None = None

    def fresh(self, key: str) -> bool:
        h = self.held.get(key)
        return h is not None and self.clock() - h.renewed_at < self.ttl_s * SAFETY

    def check(self, key: str) -> None:
        """Fencing: refuse a write whose lease may have expired."""
        if not self.fresh(key):
            self._drop(key)
            raise Unavailable("session ownership lapsed; retry", {"lease": key})

    def _drop(self, key: str) -> None:
        if self.held.pop(key, None) is not None and self.on_lost:
            self.on_lost(key)

    async def owner(self, key: str) -> str | None:
        """None when this worker owns `key` (taking it if free); else the owner's worker id."""
        now = self.clock()
        h = self.held.get(key)
        if h is not None:
            if self.fresh(key):
                h.used_at = now
                return None
            rev = await self.bus.lease_renew(key, self.worker_id, h.rev)
            if rev is not None:
                self.held[key] = Held(rev, self.clock(), now)
                return None
            self._drop(key)
        rev = await self.bus.lease_create(key, self.worker_id)
        if rev is not None:
            self.held[key] = Held(rev, self.clock(), now)
            return None
        got = await self.bus.lease_get(key)
        if got is None:
            rev = await self.bus.lease_create(key, self.worker_id)
            if rev is not None:
                self.held[key] = Held(rev, self.clock(), now)
                return None
            raise Unavailable("session ownership changing; retry", {"lease": key})
        holder, rev = got
        if holder == self.worker_id:
            self.held[key] = Held(rev, now, now)
            return None
        return holder

    def start(self) -> None:
        self._task = asyncio.create_task(self._renew_loop(), name="lease-renew")

    async def release(self, key: str) -> None:
        h = self.held.pop(key, None)
        if h is not None:
            await self.bus.lease_release(key, h.rev)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        for key, h in list(self.held.items()):
            await self.bus.lease_release(key, h.rev)
        self.held.clear()

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 4)
            now = self.clock()
            for key, h in list(self.held.items()):
                if now - h.used_at > self.idle_s:
                    self.held.pop(key, None)
                    if self.on_lost:
                        self.on_lost(key)
                    await self.bus.lease_release(key, h.rev)
                    continue
                try:
                    rev = await self.bus.lease_renew(key, self.worker_id, h.rev)
                except Exception:  # noqa: BLE001 - a failed renewal is a lost lease
                    rev = None
                if rev is None:
                    self._drop(key)
                else:
                    h.rev, h.renewed_at = rev, self.clock()


@contextlib.asynccontextmanager
async def hold(bus: LeaseStore, key: str, owner: str, ttl_s: float) -> AsyncIterator[bool]:
    """`key` held for the length of one operation, renewed every quarter of the TTL and released
    at the end: while it is held, other workers know the operation is running; once it has
    expired, that it died. Yields whether it was taken (False when someone holds the key)."""
    rev = await bus.lease_create(key, owner)
    if rev is None:
        yield False
        return
    held = rev

    async def renew() -> None:
        nonlocal held
        while True:
            await asyncio.sleep(ttl_s / 4)
            try:
                got = await bus.lease_renew(key, owner, held)
            except Exception:  # noqa: BLE001 - tried again; a lapse only lets another worker in early
                continue
            if got is None:  # lapsed (or taken): nothing left to renew
                return
            held = got

    task = asyncio.create_task(renew(), name=f"lease-{key}")
    try:
        yield True
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        with contextlib.suppress(Exception):  # not released, it expires with its TTL
            await bus.lease_release(key, held)
