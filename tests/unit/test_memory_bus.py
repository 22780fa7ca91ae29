"""The in-memory bus keeps the rules actors rely on: message-id dedup, sequenced index log, leases
compare-and-set by revision that expire unless renewed, waiters that see the next event."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from skald.actors.kit.memory_bus import MemoryBus
from skald.messages import catalog
from skald.messages.index import IndexChange, IndexDelete
from skald.messages.sessions import Phase2Job


class Ping(msgspec.Struct):
    n: int


async def test_events_and_jobs_are_stored_once_per_message_id() -> None:
    bus = MemoryBus()
    await bus.publish_event("a.b", Ping(1), "m1")
    await bus.publish_event("a.b", Ping(2), "m1")  # a retried publish
    await bus.publish_event("a.b", Ping(3), "m2")
    assert [msgspec.json.decode(d) for _, d in bus.events] == [{"n": 1}, {"n": 3}]
    assert await bus.last_event("a.b") == b'{"n":3}' and await bus.last_event("x") is None
    job = Phase2Job(account="a", user="u", session_id="s", archive_id="archive_001")
    await bus.enqueue(catalog.ARCHIVE, job, "j1")
    await bus.enqueue(catalog.ARCHIVE, job, "j1")
    assert len(bus.jobs["archive"]) == 1


async def test_a_waiter_sees_the_next_event_of_its_name_only() -> None:
    bus = MemoryBus()
    async with bus.waiter("done.1") as w, bus.waiter("done.2") as other:
        await bus.publish_event("done.1", Ping(7), "e1")
        assert await w.wait(1.0) == b'{"n":7}'
        assert await other.wait(0.01) is None


async def test_the_index_log_is_sequenced_and_followed_from_any_point() -> None:
    bus = MemoryBus()
    changes = [("t1", IndexChange(delete=IndexDelete(account="a", uri="viking://x", level=2))),
               ("t2", IndexChange(delete=IndexDelete(account="a", uri="viking://y", level=2)))]
    assert await bus.publish_index(changes) == 2 and await bus.index_last_seq() == 2
    follow = bus.follow_index(2)
    assert [seq for seq, _ in await anext(follow)] == [2]
    later = asyncio.ensure_future(anext(follow))
    await asyncio.sleep(0)
    assert not later.done()  # waits for the next change
    await bus.publish_index(changes[:1])
    assert [seq for seq, _ in await asyncio.wait_for(later, 1.0)] == [3]
    await follow.aclose()


async def test_leases_are_compare_and_set_and_expire() -> None:
    now = [100.0]
    bus = MemoryBus(lease_ttl_s=5.0, clock=lambda: now[0])
    rev = await bus.lease_create("k", "w1")
    assert rev is not None and await bus.lease_create("k", "w2") is None
    assert await bus.lease_get("k") == ("w1", rev)
    assert await bus.lease_renew("k", "w1", rev + 100) is None  # a stale revision loses
    rev2 = await bus.lease_renew("k", "w1", rev)
    assert rev2 is not None and rev2 != rev
    now[0] += 6.0  # not renewed within the TTL
    assert await bus.lease_get("k") is None and await bus.lease_renew("k", "w1", rev2) is None
    rev3 = await bus.lease_create("k", "w2")
    await bus.lease_release("k", rev2)  # the old holder's release does not free the new lease
    assert await bus.lease_get("k") == ("w2", rev3)


async def test_use_counts_add_up_once_per_message_id() -> None:
    bus = MemoryBus()
    await bus.add_usage("a", {"viking://x": 2, "viking://y": 0}, "u1")
    await bus.add_usage("a", {"viking://x": 2}, "u1")
    await bus.count_usage("a", ["viking://x"], "u2")
    follow = bus.follow_usage()
    assert await anext(follow) == [("a", "viking://x", 3)]
    await follow.aclose()


async def test_a_call_nobody_serves_is_unavailable() -> None:
    from skald.messages import errors

    with pytest.raises(errors.Unavailable):
        await MemoryBus().call(catalog.SEARCH_FIND, catalog.SEARCH_FIND.request(query="q"), None, 1.0)
