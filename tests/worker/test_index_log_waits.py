"""The index log's reads on a real nats-server that stops answering for a while (SIGSTOP: alive,
silent, as a server catching up after its disk was wiped): a replica's start waits for it rather
than failing its worker."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import nats

from skald.messages.index import IndexChange, IndexRow
from skald.runtime.bus.nats_bus import NatsBus
from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.bus.streams import ensure_streams
from support import processes


async def test_the_index_logs_last_sequence_waits_for_a_server_that_is_not_answering(tmp_path: Path) -> None:
    srv = EmbeddedNats(tmp_path / "nats", port=-1)
    srv.start()
    nc = await nats.connect(srv.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        bus = NatsBus(nc, "idxwait")
        await ensure_streams(nc.jetstream(timeout=10.0), bus.prefix)
        row = IndexRow(account="a", uri="viking://resources/x.md", level=2, parent_uri="viking://resources",
                       context_type="resource")
        seq = await bus.publish_index([("t1", IndexChange(upsert=row))])
        bus.js = nc.jetstream(timeout=0.5)  # each try gives up quickly: what is under test is the retry
        processes.silence(srv.proc.pid)
        try:
            asked = asyncio.create_task(bus.index_last_seq())
            await asyncio.sleep(2.0)  # four of its tries' timeouts
            assert not asked.done(), asked  # once it raised the first NATS timeout: its worker's start failed
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        assert await asyncio.wait_for(asked, 10) == seq
    finally:
        await nc.close()
        srv.stop()
