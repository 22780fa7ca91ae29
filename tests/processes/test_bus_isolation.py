"""No one reads what is not theirs on the bus, with keys on: the embedded server, and a three-node
cluster configured from the same keys file. A spy holding a valid key of another account, and a
connection with no key at all, try every subject while alice writes, ingests, searches and talks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from skald.messages import errors, subjects
from skald.runtime.bus import auth as busauth
from skald.runtime.bus import keys as key_store
from skald.runtime.bus.auth import WORKER_USER
from skald.runtime.client.api import SkaldClient
from skald.runtime.client.login import client_login, key_digest
from skald.runtime.host.worker import Worker
from support.cluster import Cluster
from tests.conftest import make_config

SECRET = "osprey-7731"


@dataclass
class Deployment:
    urls: list[str]
    prefix: str
    keys_path: Path
    keys: dict[str, str]  # name -> API key
    reload: Callable[[], Awaitable[None]]  # push the keys file to the bus (the embedded server follows it)


def new_keys(path: Path) -> dict[str, str]:
    out = {"root": key_store.add(path, "root")[0]}
    out["alice"] = key_store.add(path, "user", account="acme", user="alice")[0]
    out["bob"] = key_store.add(path, "user", account="globex", user="bob")[0]
    return out


@pytest.fixture(params=["embedded", "cluster"])
async def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Deployment]:
    path = tmp_path / "keys.json"
    keys = new_keys(path)
    if request.param == "embedded":
        cfg = make_config("", tmp_path / "data", keys_file=str(path), nats_port=-1)
        cfg.nats_url = ""
        w = Worker(cfg, embedded=True)
        await w.start()

        async def follow() -> None:
            await asyncio.sleep(2.5)  # the worker re-reads the keys file every second

        yield Deployment([w.url], cfg.prefix, path, keys, follow)
        await w.stop()
        return
    store = key_store.KeyStore(path)
    prefix = "bus3"
    cluster = Cluster(tmp_path, auth=busauth.authorization(prefix, store))
    await cluster.start()
    urls = cluster.urls
    w = None
    try:
        await cluster.ready(user=WORKER_USER, password=store.worker_secret)
        cfg = make_config(",".join(urls), tmp_path / "data", prefix=prefix, keys_file=str(path))
        w = Worker(cfg, embedded=False)
        await w.start()

        async def reload() -> None:  # what an operator does: new config, `nats-server --signal reload`
            text = busauth.authorization(prefix, key_store.KeyStore(path))
            for s in cluster.nodes:
                await asyncio.to_thread(s.reload, text)
            await asyncio.sleep(1.0)

        yield Deployment(urls, prefix, path, keys, reload)
    finally:
        if w is not None:
            await w.stop()
        await asyncio.to_thread(cluster.stop)


class Spy:
    """A raw connection that subscribes to whatever it is told and records what it receives."""

    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.errors: list[str] = []
        self.nc: Any = None

    async def on_error(self, e: Exception) -> None:
        self.errors.append(str(e).lower())

    async def on_msg(self, msg: Any) -> None:
        self.got.append(msg.subject.encode() + b" " + bytes(msg.data))

    async def connect(self, urls: list[str], **login: str) -> None:
        self.nc = await nats.connect(urls, error_cb=self.on_error, allow_reconnect=False, **login)

    async def subscribe(self, subject: str) -> None:
        await self.nc.subscribe(subject, cb=self.on_msg)


async def alice_works(c: SkaldClient) -> None:
    """Every kind of traffic whose content must stay hers: writes, ingest, reads, search, sessions."""
    await c.remember("entities", f"The vault code is {SECRET}.")
    await c.add_resource(content=f"# Vault\n\nThe {SECRET} vault opens at dawn.", name="vault.md", wait=True)
    hits = await c.find("vault code")
    assert any(SECRET in (m.abstract or "") for m in hits.memories + hits.resources)
    assert SECRET in (await c.read("viking://resources/vault.md")).content
    block = await c.context("vault code", max_tokens=800)
    assert SECRET in block.rendered
    await c.add_message("s1", "user", f"remember {SECRET}")
    assert any(SECRET in getattr(p, "text", "") for m in (await c.session_context("s1")).messages for p in m.parts)
    await c.commit("s1")


async def test_spies_receive_nothing_and_keys_follow_the_file(deployment: Deployment) -> None:
    d = deployment
    acme, globex = subjects.account_token("acme"), subjects.account_token("globex")
    alice_user = client_login(d.keys["alice"])["user"]
    bob_login = client_login(d.keys["bob"])

    # No key: the bus refuses the connection itself (there is no anonymous user).
    with pytest.raises(Exception):  # noqa: B017 - nats-py's refusal
        await nats.connect(d.urls, allow_reconnect=False, connect_timeout=2)
    with pytest.raises(errors.Unauthenticated):
        await SkaldClient.connect(d.urls, prefix=d.prefix)

    # bob, a valid key of another account, subscribes to what he may and tries everything else.
    spy = Spy()
    await spy.connect(d.urls, **bob_login)
    allowed = [f"{bob_login['inbox_prefix']}.>", f"{d.prefix}.evt.acct.{globex}.>", f"{d.prefix}.note.acct.{globex}.>"]
    forbidden = [">", "_INBOX.>", f"{subjects.client_inbox(alice_user)}.>", f"{subjects.WORKER_INBOX}.>",
                 f"{d.prefix}.v1.>", f"{d.prefix}.index.>", f"{d.prefix}.work.>", f"{d.prefix}.evt.>",
                 f"{d.prefix}.evt.acct.{acme}.>", f"{d.prefix}.note.acct.{acme}.>", f"{d.prefix}.internal.>",
                 f"{d.prefix}.direct.>", "$JS.>"]
    for s in allowed + forbidden:
        await spy.subscribe(s)
    await spy.nc.flush()

    # alice, watching her own account's events, does her work.
    alice = await SkaldClient.connect(d.urls, prefix=d.prefix, api_key=d.keys["alice"])
    own: list[bytes] = []

    async def on_own(msg: Any) -> None:
        own.append(bytes(msg.data))

    sub = await alice.nc.subscribe(f"{d.prefix}.evt.acct.{acme}.ingest.done.*", cb=on_own)
    await alice_works(alice)
    await asyncio.sleep(0.5)
    await sub.unsubscribe()
    assert own, "alice receives her own account's ingest events"
    assert (await alice.whoami()).account == "acme"

    denied = [e for e in spy.errors if "permissions violation for subscription" in e]
    assert len(denied) == len(forbidden), spy.errors
    assert not any(SECRET.encode() in m for m in spy.got), "bob saw alice's content"
    assert spy.got == []  # and nothing else of hers either: no reply, event, row or job

    # A key added to the file works without a restart; a revoked key's connection is closed.
    dave = key_store.add(d.keys_path, "user", account="acme", user="dave")[0]
    alice_id = next(r.id for r in key_store.KeyStore(d.keys_path).records()
                    if r.hash == key_digest(d.keys["alice"]))
    assert key_store.revoke(d.keys_path, alice_id)
    await d.reload()
    async with await SkaldClient.connect(d.urls, prefix=d.prefix, api_key=dave) as c:
        assert (await c.whoami()).user == "dave"
    for _ in range(40):
        if not alice.nc.is_connected:
            break
        await asyncio.sleep(0.25)
    assert not alice.nc.is_connected, "a revoked key's connection stays open"
    with pytest.raises(Exception):  # noqa: B017 - closed or reconnecting: nothing goes out
        await alice.find("vault", timeout_s=2.0)
    await alice.close()  # closed, although it cannot drain while it tries to reconnect
    assert alice.nc.is_closed
    await spy.nc.close()
    with pytest.raises(errors.Unauthenticated):
        await SkaldClient.connect(d.urls, prefix=d.prefix, api_key=d.keys["alice"])
