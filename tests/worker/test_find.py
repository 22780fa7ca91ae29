"""search.find on a real bus: the index replica follows a JetStream stream, and a follower the
server lost is noticed and recreated (every parameter of find is `tests/logic/test_find.py`)."""

from __future__ import annotations

import asyncio

from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.worker import Worker


async def test_a_replica_whose_follower_died_reports_lag_and_never_serves_stale(skald: Worker,
                                                                                client: SkaldClient) -> None:
    """The index follower's consumer deleted on the server (what a dead node does to it): the replica
    reports lag > 0 within seconds from the stream's own last sequence, a read-your-writes find either
    waits, answers UNAVAILABLE (retried by the client) or sees the write, never stale rows, and the
    follower is recreated."""
    await client.write("viking://resources/rw/a.md", "Alpha apples grow in autumn orchards.")
    js = client.nc.jetstream(timeout=5.0)
    stream = stream_name(skald.cfg.prefix, "index")
    for ci in await js.consumers_info(stream):
        await js.delete_consumer(stream, ci.name)
    await client.write("viking://resources/rw/b.md", "Banana bread needs very ripe bananas.")
    seen_lag = 0
    for _ in range(40):
        retr = (await client.health()).actors["retriever"]
        seen_lag = max(seen_lag, retr["lag"])
        if seen_lag:
            break
        await asyncio.sleep(0.1)
    found = await client.find("banana bread", target_uri="viking://resources/rw", level=2)
    assert "viking://resources/rw/b.md" in [h.uri for h in found.resources]  # never stale
    for _ in range(100):
        retr = (await client.health()).actors["retriever"]
        if retr["lag"] == 0:
            break
        await asyncio.sleep(0.1)
    assert retr["lag"] == 0 and retr["stale_s"] == 0
    # nats-py sometimes re-creates a deleted ordered consumer by itself (no stall at all); when it
    # did not, the watchdog had to, and the stall was visible in health while it lasted.
    if retr["follower_restarts"]:
        assert seen_lag > 0
    print(f"lag seen {seen_lag}, retried {client.retried}, follower restarts {retr['follower_restarts']}")
