"""`skald store reshard`: the index stream's rows moved to the subjects of another shard count,
so a deployment grows from one retriever group to several (or back) without embedding anything
again.

A row's subject names its shard (`<prefix>.index.row.s<k>.<token>`, or no shard when the index is
one: `store/index/shards.py` says which rows go together). Each row's latest change is read,
published under the subject the new count gives it, and its old subject purged once every new one
is stored. Run it with the workers stopped, then start them with `SKALD_INDEX_SHARDS` set to the
new count: each shard's replicas read their rows from the stream (a replica keeps one snapshot per
shard layout, so none loads another layout's rows; one of the same layout from before follows the
stream from its sequence, and every moved row comes after it). Killed part way, it is run again:
a row still under its old subject is published again (one message is kept per subject, so the
copy replaces itself) and the purge is repeated; rows already moved are left as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
from nats.js import api

from skald.runtime.bus.index_stream import row_subject
from skald.runtime.bus.streams import stream_name
from skald.store import faults

WINDOW = 256  # publishes or purges in flight at once


class _Where(msgspec.Struct):
    """What of a row's change its shard is chosen by (the rest of the message is not decoded)."""

    account: str
    uri: str


class _Change(msgspec.Struct):
    upsert: _Where | None = None
    delete: _Where | None = None


_dec = msgspec.msgpack.Decoder(_Change)


class Report(msgspec.Struct, kw_only=True):
    """What a reshard did: rows read, moved to another subject, already where the new count puts
    them."""

    shards: int
    rows: int = 0
    moved: int = 0
    kept: int = 0


def target(prefix: str, tail: str, data: bytes, shards: int) -> str:
    """A row message's subject under `shards` (pure); `tail` is its subject after
    `<prefix>.index.row.`: a row token, or `s<k>.` and the token."""
    now, _, token = tail.partition(".")
    if not (token and now.startswith("s") and now[1:].isdigit()):
        token = tail
    change = _dec.decode(data)
    at = change.upsert or change.delete
    if at is None:  # an empty change (none is written): wherever it stands
        return f"{prefix}.index.row.{tail}"
    return row_subject(prefix, token, at.account, at.uri, shards)


async def reshard(js: Any, prefix: str, shards: int, progress: Callable[[Report], None] | None = None) -> Report:
    """Move every row of `prefix`'s index stream to the subject `shards` gives it."""
    stream = stream_name(prefix, "index")
    state = (await js.stream_info(stream)).state
    last, count = int(state.last_seq), int(state.messages)
    rep = Report(shards=shards)
    if count == 0:
        return rep
    head = f"{prefix}.index.row."
    queue: asyncio.Queue[tuple[int, str, bytes]] = asyncio.Queue()

    async def cb(msg: Any) -> None:
        queue.put_nowait((msg.metadata.sequence.stream, msg.subject, msg.data))

    sub = await js.subscribe(f"{head}>", stream=stream, cb=cb, ordered_consumer=True,
                             config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
                             pending_msgs_limit=1_000_000, pending_bytes_limit=2**31 - 1)
    old_subjects: list[str] = []
    pending: list[Any] = []
    try:
        while True:
            try:
                seq, subject, data = await asyncio.wait_for(queue.get(), timeout=30.0)
            except TimeoutError:
                raise RuntimeError(f"the index stream stopped delivering after {rep.rows} of {count} rows; "
                                   "run it again") from None
            if seq > last:  # one this run published: every row it found is read
                break
            new = target(prefix, subject[len(head):], data, shards)
            rep.rows += 1
            if new == subject:
                rep.kept += 1
            else:
                pending.append(js.publish(new, data))
                old_subjects.append(subject)
                rep.moved += 1
                if len(pending) >= WINDOW:
                    await asyncio.gather(*pending)
                    pending = []
                    faults.point("reshard.window")  # some rows under both subjects, the rest only the old
            if progress is not None and rep.rows % 10_000 == 0:
                progress(rep)
            if seq == last or rep.rows == count:
                break
        await asyncio.gather(*pending)
    finally:
        await sub.unsubscribe()
    faults.point("reshard.published")  # every row under its new subject too, no old one purged
    # Every new subject is stored: the old ones go. Unsharded subjects are one token after the
    # head and sharded ones two, so a whole layout left behind goes in one purge by wildcard (the
    # new subjects are of the other layout); rows moved between shards, one purge each.
    unsharded = [s for s in old_subjects if "." not in s[len(head):]]
    between = [s for s in old_subjects if "." in s[len(head):]]
    if unsharded:  # moving to shards: every unsharded row moved
        await js.purge_stream(stream, subject=f"{head}*")
    if between and shards == 1:  # moving to one index: every sharded row moved
        await js.purge_stream(stream, subject=f"{head}*.*")
        between = []
    for i in range(0, len(between), WINDOW):
        await asyncio.gather(*(js.purge_stream(stream, subject=s) for s in between[i : i + WINDOW]))
    return rep
