"""The JetStream tree's buckets, one per account (`tree_buckets.py`): each opened, created and placed
once per process however many callers ask for it at the same moment, and named in the system bucket
where a listing of every account finds it. Split from `jetstream_tree.py`, which reaches a key's
bucket through `AccountBuckets.of`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from skald.runtime.bus import tree_moves
from skald.runtime.bus.streams import TRANSIENT
from skald.runtime.bus.tree_buckets import SYSTEM, Bucket, account_of, bucket_name
from skald.runtime.bus.tree_keys import ACCOUNTS, token

log = logging.getLogger("skald.bus")


class AccountBuckets:
    """The buckets of one tree (`base`), by account."""

    def __init__(self, js: Any, base: str, replicas: int, placement: dict[str, list[str]]) -> None:
        self.js = js
        self.base = base
        self.replicas = replicas
        self.placement = placement  # account -> placement tags; "*" for every other account
        self._buckets: dict[str, Bucket] = {}
        self._opening: dict[str, asyncio.Future[Bucket]] = {}

    async def bucket(self, account: str) -> Bucket:
        """An account's bucket, opened (and created, placed) once per process."""
        if (b := self._buckets.get(account)) is not None:
            return b
        if (fut := self._opening.get(account)) is None:
            fut = self._opening[account] = asyncio.ensure_future(self._create(account))
        try:
            b = await asyncio.shield(fut)
        except BaseException:
            self._opening.pop(account, None)
            raise
        self._buckets[account] = b
        return b

    async def _create(self, account: str) -> Bucket:
        tags = self.placement.get(account, self.placement.get("*"))
        b = await Bucket.open(self.js, bucket_name(self.base, account), self.replicas, tags)
        try:
            await tree_moves.finish_all(b)
        except TRANSIENT as e:  # a group still electing its leader: the bucket opens, the next opening finishes them
            log.warning("unfinished moves of %s left for later (%s)", b.name, type(e).__name__)
        if account != SYSTEM:  # named where a listing of every account finds it
            system = await self.bucket(SYSTEM)
            await system.put(f"{ACCOUNTS}.{token(account)}", b"")
        return b

    async def of(self, key: str) -> Bucket:
        """The bucket a tree key's file lives in."""
        account = account_of(key)
        if account is None:
            raise IsADirectoryError(key)  # `accounts` or `uploads` themselves: no file is there
        return await self.bucket(account)
