"""Use counts (`active_count`): memories served in a context block or reported used by
`sessions.used` count once more, on every replica, and hotness ranks by them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from skald.messages import errors
from skald.runtime.client.api import SkaldClient


async def uses_of(c: SkaldClient, query: str, uri: str, want: int, timeout_s: float = 5.0) -> int:
    """The hit's active_count once it reaches `want` (replicas follow the counters a moment later)."""
    end = time.monotonic() + timeout_s
    got = -1
    while time.monotonic() < end:
        r = await c.find(query, limit=20, score_threshold=0.0)
        got = next((m.active_count for m in r.memories if m.uri == uri), -1)
        if got >= want:
            return got
        await asyncio.sleep(0.05)
    return got


async def test_memories_served_in_a_context_block_count_one_use_each(client: SkaldClient) -> None:
    """A block that serves a memory counts it (once per block); a find does not count; a memory no
    block served stays at zero."""
    kept = await client.remember("preferences", "Alice drinks oolong tea every morning at seven.")
    other = await client.remember("entities", "The build server is called hopper and runs Debian.")
    tea = kept.root_uri
    assert await uses_of(client, "oolong tea", tea, 0) == 0
    for _ in range(3):
        block = await client.context("what tea does alice drink in the morning", max_tokens=400)
        assert tea in [e.uri for e in block.entries]
        assert block.stats.uses_counted == len(block.entries)
    assert await uses_of(client, "oolong tea", tea, 3) == 3
    await asyncio.sleep(0.3)
    assert await uses_of(client, "oolong tea", tea, 4, timeout_s=0.2) == 3  # finds counted nothing
    await client.forget(other.root_uri)
    later = await client.remember("entities", "The staging database is called curie.")
    assert await uses_of(client, "staging database curie", later.root_uri, 0) == 0


async def test_sessions_used_counts_each_node_once_per_request(client: SkaldClient) -> None:
    """`sessions.used` counts the canonical node (`~` and level suffixes resolved); the same
    request_id again counts nothing; an unknown session is NOT_FOUND."""
    m = await client.remember("events", "We moved caddy to port 1935 on Tuesday.")
    await client.session_create("s-used")
    r = await client.used("s-used", [m.root_uri, m.root_uri.replace("viking://user/default", "viking://~")],
                          request_id="r1")
    assert r.counted == [m.root_uri]
    assert await uses_of(client, "caddy port", m.root_uri, 1) == 1
    await client.used("s-used", [m.root_uri], request_id="r1")  # a retry: the same key
    await client.used("s-used", [m.root_uri], request_id="r2")
    assert await uses_of(client, "caddy port", m.root_uri, 2) == 2
    await asyncio.sleep(0.3)
    assert await uses_of(client, "caddy port", m.root_uri, 3, timeout_s=0.3) == 2  # r1 was not counted twice
    with pytest.raises(errors.NotFound):
        await client.used("no-such-session", [m.root_uri])


@pytest.mark.parametrize("body, field", [
    (b'{"session_id": "s", "uris": []}', "uris"),
    (b'{"session_id": "s", "uris": "viking://x"}', "uris"),
    (b'{"session_id": "s"}', "uris"),
    (b'{"session_id": "s", "uris": ["viking://resources/a"], "extra": 1}', "extra"),
])
async def test_sessions_used_refuses_garbage(client: SkaldClient, body: bytes, field: str) -> None:
    resp, _ = await client.raw("sessions.used", body, {})
    assert resp.status == "error" and resp.error["code"] == "INVALID_ARGUMENT" and field in resp.error["message"]


async def test_a_used_memory_outranks_a_closer_unused_one_with_hotness(deploy: Callable[..., Any]) -> None:
    """With hotness on, use moves a memory above one the query matches slightly better; with
    hotness off (the default), the order is the similarity's."""
    ranks = {}
    for alpha in (0.0, 0.5):
        w, c = await deploy(hotness_alpha=alpha)
        near = await c.remember("preferences", "The team prefers green tea in meetings.")
        used = await c.remember("preferences", "The team prefers green tea in meetings, with lemon.")
        await c.session_create("s1")
        for i in range(4):
            await c.used("s1", [used.root_uri], request_id=f"u{i}")
        assert await uses_of(c, "green tea", used.root_uri, 4) == 4
        r = await c.search("The team prefers green tea in meetings.", limit=5, score_threshold=0.0)
        order = [m.uri for m in r.memories]
        ranks[alpha] = (order.index(near.root_uri), order.index(used.root_uri))
    assert ranks[0.0] == (0, 1)  # similarity alone: the closer text first
    assert ranks[0.5] == (1, 0)  # four uses lift the other above it
