"""The group commit's promises to a caller that gives up, on a real bus and real files: a line
still queued when its caller is cancelled is never written; one already being written is
accepted, and its caller is told so; the journal gets exactly the accepted lines."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import nats
import pytest

from skald.actors.session.batcher import AppendBatcher, event_name
from skald.messages.sessions import Message, MessagesAdded, TextPart
from skald.runtime.bus.nats_bus import NatsBus
from skald.runtime.bus.streams import ensure_streams
from skald.store.local_tree import LocalTree
from skald.store.uri import Identity


def _msg(mid: str) -> Message:
    return Message(id=mid, role="user", parts=[TextPart(text=f"text of {mid}")])


async def test_a_cancelled_caller_is_dropped_before_the_write_and_answered_after_it(
        nats_url: str, tmp_path: Path) -> None:
    nc = await nats.connect(nats_url)
    loop = asyncio.get_running_loop()
    # The flush waits behind `gate` on the one thread of this pool. The loop is the session's (every
    # test shares it): its own executor is put back afterwards, or later tests' to_thread would fail.
    previous = loop._default_executor  # type: ignore[attr-defined]
    pool = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(pool)
    gate = threading.Event()
    try:
        bus = NatsBus(nc, "batchcancel")
        await ensure_streams(nc.jetstream(timeout=10.0), bus.prefix)
        appends = AppendBatcher(bus, LocalTree(tmp_path))
        path = tmp_path / "messages.jsonl"
        held = loop.run_in_executor(None, gate.wait)
        writing = asyncio.create_task(appends.append("k1", "s1", "messages.jsonl", _msg("a"), Identity()))
        for _ in range(5):  # the drain claims "a" and queues its flush behind the gate
            await asyncio.sleep(0)
        queued = asyncio.create_task(appends.append("k1", "s1", "messages.jsonl", _msg("b"), Identity()))
        await asyncio.sleep(0)
        writing.cancel()
        queued.cancel()
        await asyncio.sleep(0.05)
        gate.set()
        await held
        assert await asyncio.wait_for(writing, 10) is None  # accepted: its line was being written
        with pytest.raises(asyncio.CancelledError):
            await queued  # never written: its caller's cancellation is the truth
        await asyncio.wait_for(appends.quiet("k1"), 10)  # no append of the session left open
        assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["a"]
        await asyncio.wait_for(appends.flush("k1", 10), 10)
        raw = await bus.last_event(event_name("k1"))
        assert raw is not None
        assert [e.message.id for e in msgspec.json.decode(raw, type=MessagesAdded).entries] == ["a"]
        # the next caller is served as usual, after both
        assert await asyncio.wait_for(appends.append("k1", "s1", "messages.jsonl", _msg("c"), Identity()), 10) is None
        assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["a", "c"]
    finally:
        gate.set()
        loop._default_executor = previous  # type: ignore[attr-defined]
        await nc.close()
        pool.shutdown(wait=True)
