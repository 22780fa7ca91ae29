"""The index log on JetStream: row changes published one subject per row (in a sharded index,
under the row's shard), and a replica's ordered follower from a sequence on (its shard's rows alone)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from nats.js import api
from nats.js.errors import NotFoundError

from skald.messages import subjects
from skald.messages.index import IndexChange, IndexRow
from skald.runtime.bus.streams import TRANSIENT, stream_name
from skald.store.index.shards import shard_of
from skald.store.index.types import row_subject_token

log = logging.getLogger("skald.bus")
_enc = msgspec.msgpack.Encoder()
_change_dec = msgspec.msgpack.Decoder(IndexChange)


def row_subject(prefix: str, token: str, account: str, uri: str, shards: int) -> str:
    """The subject of a row of `account` at `uri` in an index of `shards` shards (the reshard moves
    rows by the same rule)."""
    return subjects.index_row(prefix, token, shard_of(account, uri, shards) if shards > 1 else None)


class IndexStream:
    """The index log's half of the NATS bus (a mixin of `NatsBus`, which supplies the connection,
    the acknowledged publisher and the retry through stream elections)."""

    prefix: str
    js: Any
    index_shards: int
    index_shard: int
    _js_publish: Callable[..., Awaitable[Any]]
    _through_election: Callable[[Callable[[], Awaitable[Any]], str], Awaitable[Any]]

    async def publish_index(self, changes: list[tuple[str, IndexChange]]) -> int:
        """Publish row changes concurrently; returns the highest stream sequence acknowledged."""
        if not changes:
            return 0
        last = 0
        window = 256
        n = self.index_shards

        def subject(token: str, ch: IndexChange) -> str:
            at = ch.upsert or ch.delete
            if at is None:
                return subjects.index_row(self.prefix, token, 0 if n > 1 else None)
            return self._row_subject(token, at.account, at.uri)

        for i in range(0, len(changes), window):
            acks = await asyncio.gather(*(
                self._js_publish(subject(token, ch), _enc.encode(ch))
                for token, ch in changes[i : i + window]
            ))
            last = max(last, max(a.seq for a in acks))
        return last

    def _row_subject(self, token: str, account: str, uri: str) -> str:
        return row_subject(self.prefix, token, account, uri, self.index_shards)

    async def latest_rows(self, keys: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], IndexRow]:
        """Each row's subject's last message, read from the stream a window at a time."""
        out: dict[tuple[str, str, int], IndexRow] = {}
        stream = stream_name(self.prefix, "index")

        async def one(key: tuple[str, str, int]) -> None:
            account, uri, level = key
            try:
                msg = await self.js.get_msg(stream, subject=self._row_subject(
                    row_subject_token(account, uri, level), account, uri))
                change = _change_dec.decode(msg.data or b"")
            except (NotFoundError, msgspec.DecodeError, *TRANSIENT):
                return  # not there, or not now: the caller does without it
            if change.upsert is not None:
                out[key] = change.upsert

        for i in range(0, len(keys), 64):
            await asyncio.gather(*(one(k) for k in keys[i : i + 64]))
        return out

    async def index_last_seq(self) -> int:
        """The index stream's last sequence (0: no stream yet), through a leader election as the
        other reads are: a replica asks it as it starts, and a worker starting beside a server that
        is still catching up (its disk just wiped) must wait for it, not exit."""
        async def get() -> int:
            try:
                info = await self.js.stream_info(stream_name(self.prefix, "index"))
            except NotFoundError:
                return 0
            return int(info.state.last_seq)

        return await self._through_election(get, "the index stream is not answering")  # type: ignore[no-any-return]

    def _index_filter(self) -> str:
        return subjects.index_rows(self.prefix, self.index_shard if self.index_shards > 1 else None)

    async def index_next_seq(self, after: int) -> int:
        """The stream sequence of the first change after `after` that this worker's replica follows
        (0: none stored yet). With a sharded index the stream's last sequence may be another
        shard's, which this replica never receives: this is how it knows it has all of its own."""
        async def get() -> int:
            try:
                msg = await self.js.get_msg(stream_name(self.prefix, "index"), seq=after + 1,
                                            subject=self._index_filter(), next=True)
            except NotFoundError:
                return 0
            return int(msg.seq or 0)

        return await self._through_election(get, "the index stream is not answering")  # type: ignore[no-any-return]

    async def follow_index(self, start_seq: int) -> AsyncIterator[list[tuple[int, IndexChange]]]:
        """Batches of (stream seq, change) from `start_seq` on, for as long as the caller iterates."""
        queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

        async def cb(msg: Any) -> None:
            queue.put_nowait((msg.metadata.sequence.stream, msg.data))

        cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(1, start_seq))
        sub = await self.js.subscribe(self._index_filter(), stream=stream_name(self.prefix, "index"),
                                      cb=cb, ordered_consumer=True, config=cfg,
                                      pending_msgs_limit=1_000_000, pending_bytes_limit=2**31 - 1)
        try:
            while True:
                first = await queue.get()
                batch = [first]
                while not queue.empty() and len(batch) < 4096:
                    batch.append(queue.get_nowait())
                out = []
                for seq, data in batch:
                    try:
                        out.append((seq, _change_dec.decode(data)))
                    except msgspec.DecodeError:
                        log.error("undecodable index change at seq %d skipped", seq)
                yield out
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
