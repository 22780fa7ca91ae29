"""The actor host's guarantees, with a small actor of the test's own on a real nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import nats
import pytest

from skald.actors.kit.decl import handles
from skald.actors.kit.request import Ctx
from skald.messages import errors
from skald.messages.catalog import Op
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.actor_host import ActorHost
from skald.runtime.host.config import Config
from skald.store.uri import Identity


class Nap(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    seconds: float = 0.0
    fail: str = ""


NAP = Op("test.nap", Nap, None, "Sleep, fail or warn as asked.")
SOLO = Op("test.solo", Nap, None, "Sleep; at most one at a time per worker.")


class Sleeper:
    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    @handles(NAP, timeout_s=5.0)
    async def nap(self, req: Nap, ctx: Ctx) -> dict:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await self._nap(req, ctx)
        finally:
            self.now -= 1

    @handles(SOLO, timeout_s=5.0, concurrency=1)
    async def solo(self, req: Nap, ctx: Ctx) -> dict:
        return await self._nap(req, ctx)

    async def _nap(self, req: Nap, ctx: Ctx) -> dict:
        if req.fail == "typed":
            raise errors.Conflict("typed failure", {"why": "asked"})
        if req.fail == "crash":
            raise RuntimeError("boom")
        if req.fail == "deprecated":
            ctx.deprecated.append("max_chars")
        await asyncio.sleep(req.seconds)
        return {"slept": req.seconds, "user": ctx.identity.user}


@pytest.fixture
async def host(nats_url: str) -> AsyncIterator[tuple[ActorHost, SkaldClient]]:
    cfg = Config.from_env(env={}, nats_url=nats_url)
    cfg.prefix = "hosttest"
    cfg.max_concurrency = 4
    nc = await nats.connect(nats_url)
    h = ActorHost(nc, cfg, {"sleeper": Sleeper()})
    await h.start()
    c = await SkaldClient.connect(nats_url, user="bob")
    c.prefix = "hosttest"
    yield h, c
    await c.close()
    await h.stop()
    await nc.drain()


async def test_requests_run_concurrently(host: tuple[ActorHost, SkaldClient]) -> None:
    """One slow request does not hold up the next: a task per request, not per subscription."""
    h, c = host
    out = await asyncio.gather(*(c.call("test.nap", {"seconds": 0.3}) for _ in range(4)))
    assert all(o["user"] == "bob" for o in out)
    assert h.actors["sleeper"].peak == 4  # type: ignore[attr-defined]


async def test_deadline_exceeded_is_a_typed_reply(host: tuple[ActorHost, SkaldClient]) -> None:
    _, c = host
    with pytest.raises(errors.DeadlineExceeded):
        await c.call("test.nap", {"seconds": 2.0}, timeout_s=0.2)


async def test_capacity_answers_unavailable(host: tuple[ActorHost, SkaldClient]) -> None:
    """Past max_concurrency the worker says UNAVAILABLE at once instead of queueing without bound."""
    _, c = host
    results = await asyncio.gather(*(c.call("test.nap", {"seconds": 0.5}) for _ in range(8)),
                                   return_exceptions=True)
    unavailable = [r for r in results if isinstance(r, errors.Unavailable)]
    assert len(unavailable) == 4 and sum(isinstance(r, dict) for r in results) == 4


async def test_handler_concurrency_is_part_of_its_declaration(host: tuple[ActorHost, SkaldClient]) -> None:
    """A handler declared with concurrency=1 runs one request at a time; the next is UNAVAILABLE
    at once, while the worker still has room for other operations."""
    _, c = host
    results = await asyncio.gather(*(c.call("test.solo", {"seconds": 0.4}) for _ in range(3)),
                                   c.call("test.nap", {"seconds": 0.1}), return_exceptions=True)
    assert sum(isinstance(r, errors.Unavailable) for r in results[:3]) == 2
    assert isinstance(results[3], dict)
    assert (await c.call("test.solo", {}))["slept"] == 0.0  # the slot is free again


async def test_typed_errors_crashes_and_deprecation(host: tuple[ActorHost, SkaldClient]) -> None:
    h, c = host
    with pytest.raises(errors.Conflict) as ei:
        await c.call("test.nap", {"fail": "typed"})
    assert ei.value.details == {"why": "asked"}
    with pytest.raises(errors.Internal):
        await c.call("test.nap", {"fail": "crash"})
    resp, hdrs = await c.raw("test.nap", b'{"fail": "deprecated"}')
    assert resp.status == "ok" and hdrs.get("Deprecation") == "true"
    assert (await c.call("system.health"))["worker"]["in_flight"] >= 0
    assert h.info().handled >= 3


class Box(msgspec.Struct):
    items: list[int]


FRESH = Op("test.fresh", Nap, None, "A new Box every call, kept by nobody.")
KEPT = Op("test.kept", Nap, None, "A Box the actor keeps.")


class Boxer:
    def __init__(self) -> None:
        self.last: Box | None = None

    @handles(FRESH, fresh_result=True)
    async def fresh(self, req: Nap, ctx: Ctx) -> Box:
        self.last = Box(items=[1])
        return self.last

    @handles(KEPT)
    async def kept(self, req: Nap, ctx: Ctx) -> Box:
        self.last = Box(items=[1])
        return self.last


async def test_a_local_call_copies_a_result_unless_the_handler_says_it_is_fresh(nats_url: str) -> None:
    """An in-process caller gets its own copy of a result the handler may keep; a handler that
    declares `fresh_result` hands over the object itself (no copy: nobody else holds it)."""
    cfg = Config.from_env(env={}, nats_url=nats_url)
    cfg.prefix = "hostlocal"
    nc = await nats.connect(nats_url)
    boxer = Boxer()
    h = ActorHost(nc, cfg, {"boxer": boxer})
    await h.start()
    try:
        got = await h.call_local("test.fresh", Nap(), Identity(), 5.0, into=Box)
        assert got is boxer.last
        got = await h.call_local("test.kept", Nap(), Identity(), 5.0, into=Box)
        assert got == boxer.last and got is not boxer.last
        got.items.append(2)
        assert boxer.last.items == [1]
        assert await h.call_local("test.fresh", Nap(), Identity(), 5.0) == {"items": [1]}  # untyped: decoded JSON
    finally:
        await h.stop()
        await nc.drain()


class Saver:
    """An actor whose stop takes `stop_s` and says how long stopping may take (`declared`)."""

    def __init__(self, stop_s: float, declared: float | None) -> None:
        self.stop_s, self.saved = stop_s, False
        if declared is not None:
            self.stop_grace_s = lambda: declared

    async def stop(self) -> None:
        await asyncio.sleep(self.stop_s)
        self.saved = True


@pytest.mark.parametrize(("declared", "saved"), [(1.0, True), (None, False)])
async def test_stop_waits_as_long_as_an_actor_says(nats_url: str, monkeypatch: pytest.MonkeyPatch,
                                                   declared: float | None, saved: bool) -> None:
    """A stop that saves in proportion to what the actor holds (the retriever's snapshot, 24-28 s
    at a million rows) is waited for as long as the actor says, past the host's own grace; an
    actor that says nothing is left after the host's grace, as before."""
    from skald.runtime.host import actor_host
    monkeypatch.setattr(actor_host, "STOP_GRACE_S", 0.2)
    cfg = Config.from_env(env={}, nats_url=nats_url)
    cfg.prefix = "stoptest"
    nc = await nats.connect(nats_url)
    saver = Saver(0.5, declared)
    h = ActorHost(nc, cfg, {"saver": saver})
    await h.start()
    await h.stop()
    await nc.drain()
    assert saver.saved is saved
