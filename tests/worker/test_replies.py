"""A connection's reply inbox (runtime/client/replies.py) on a real server: every reply reaches its own
request among many in flight, and nats-py's failures are raised as `nc.request` raises them."""

from __future__ import annotations

import asyncio
import gc
import weakref

import nats
import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from skald.runtime.client import replies


async def test_replies_match_requests_and_fail_as_nats_py_does(nats_url: str) -> None:
    server = await nats.connect(nats_url)
    nc = await nats.connect(nats_url)
    late: list[str] = []

    async def echo(m: Msg) -> None:
        if m.data == b"slow":
            await asyncio.sleep(0.3)
            late.append(m.reply)
        await server.publish(m.reply, m.data.upper() + (m.headers or {}).get("n", "").encode())

    try:
        await server.subscribe("rep.echo", cb=echo)
        await server.flush()
        rep = replies.of(nc)
        assert replies.of(nc) is rep  # one inbox subscription per connection
        got = await asyncio.gather(*(rep.request("rep.echo", f"m{i}".encode(), 5.0, {"n": str(i)})
                                     for i in range(300)))
        assert [m.data for m in got] == [f"M{i}{i}".encode() for i in range(300)]
        with pytest.raises(NoRespondersError):
            await rep.request("rep.nobody", b"x", 5.0)
        with pytest.raises(NatsTimeout):
            await rep.request("rep.echo", b"slow", 0.05)
        await asyncio.sleep(0.4)  # the slow reply arrives after its request gave up: dropped
        assert late and not rep._waiting
        assert (await rep.request("rep.echo", b"after", 5.0)).data == b"AFTER"
    finally:
        await nc.close()
        await server.close()



async def test_a_closed_connection_and_its_inbox_are_freed(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    with pytest.raises(NoRespondersError):
        await replies.of(nc).request("rep.nobody.here", b"", 5.0)  # the inbox subscribed
    gone = weakref.ref(nc)
    await nc.close()
    del nc
    gc.collect()
    assert gone() is None
