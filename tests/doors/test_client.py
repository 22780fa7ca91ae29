"""The Python client: every typed method against a real deployment, every error class, and the
sync wrapper."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from skald.messages import context as context_msgs
from skald.messages import errors
from skald.messages import fs as fs_msgs
from skald.messages import search as search_msgs
from skald.messages import sessions as session_msgs
from skald.messages.catalog import OPS
from skald.runtime.client.api import SkaldClient
from skald.runtime.client.sync import SyncSkaldClient


async def test_every_typed_method_returns_its_struct(deploy: Callable[..., Any], nats_url: str) -> None:
    w, _ = await deploy()
    sk = await SkaldClient.connect(nats_url, prefix=w.cfg.prefix)
    try:
        wr = await sk.write("viking://resources/notes/a.md", "# Alpha\n\nThe alpha note about caddy ports.\n")
        assert isinstance(wr, fs_msgs.WriteResult) and wr.uri == "viking://resources/notes/a.md"
        assert isinstance(await sk.mkdir("viking://resources/empty"), fs_msgs.ChangeResult)
        assert (await sk.read("viking://resources/notes/a.md")).content.startswith("# Alpha")
        assert [e.name for e in (await sk.ls("viking://resources/notes")).entries] == ["a.md"]
        assert isinstance(await sk.tree("viking://resources"), fs_msgs.TreeResult)
        assert (await sk.stat("viking://resources/notes/a.md")).size > 0
        assert "alpha" in (await sk.abstract("viking://resources/notes/a.md")).content.lower()
        assert isinstance(await sk.overview("viking://resources/notes"), fs_msgs.TextResult)
        mem = await sk.remember("preferences", "Prefers caddy over nginx.")
        assert mem.root_uri.startswith("viking://user/default/memories/preferences/")
        res = await sk.add_resource(content="# Guide\n\nCaddy guide.", name="guide.md", wait=True)
        assert res.root_uri == "viking://resources/guide.md"
        sk_ = await sk.add_skill(content="---\nname: port\ndescription: set caddy ports\n---\nbody", wait=True)
        assert sk_.root_uri.endswith("/port")
        found = await sk.find("caddy")
        assert isinstance(found, search_msgs.FindResult) and found.total >= 2
        listed = await sk.search("caddy ports", level=2)
        assert isinstance(listed, search_msgs.FindResult) and listed.query_plan is not None
        ctx = await sk.context("caddy ports", score_threshold=0.0)
        assert isinstance(ctx, context_msgs.ContextResult) and ctx.entries and ctx.rendered
        assert isinstance(await sk.recall("caddy ports", min_score=0.0), context_msgs.ContextResult)
        assert isinstance(await sk.bootstrap(max_tokens=500), context_msgs.ContextResult)
        assert (await sk.grep("viking://resources", "alpha", case_insensitive=True)).count == 2  # two lines
        assert "viking://resources/notes/a.md" in (await sk.glob("**/*.md", uri="viking://resources")).matches
        info = await sk.session_create("c1")
        assert isinstance(info, session_msgs.SessionInfo) and info.session_id == "c1"
        added = await sk.add_message("c1", "user", "hello there")
        assert isinstance(added, session_msgs.AddMessageResult) and added.message_count == 1
        await sk.add_message("c1", "assistant", parts=[{"type": "text", "text": "hi"}])
        assert (await sk.session_get("c1")).total_message_count == 2
        assert [s.session_id for s in (await sk.session_list()).sessions] == ["c1"]
        done = await sk.commit("c1", keep_recent_count=0, wait=True)
        assert isinstance(done, session_msgs.CommitResult) and done.status == "accepted"
        assert isinstance(await sk.session_context("c1"), session_msgs.ContextResult)
        assert len((await sk.archives("c1")).archives) == 1
        assert isinstance(await sk.session_delete("c1"), session_msgs.DeleteResult)
        assert isinstance(await sk.mv("viking://resources/notes/a.md", "viking://resources/notes/b.md"),
                          fs_msgs.ChangeResult)
        assert isinstance(await sk.rm("viking://resources/notes", recursive=True), fs_msgs.ChangeResult)
        assert (await sk.health()).status == "ok"
        assert (await sk.stats()).retrieval is not None
    finally:
        await sk.close()


def test_the_catalog_covers_every_public_subject() -> None:
    from support.requests import SUBJECTS
    assert set(OPS) == set(SUBJECTS)


async def test_error_classes(client: SkaldClient) -> None:
    with pytest.raises(errors.InvalidArgument):
        await client.find("x", limit=0)
    with pytest.raises(errors.NotFound):
        await client.read("viking://resources/nope.md")
    with pytest.raises(errors.PermissionDenied):
        await client.read("viking://user/someone-else/memories/x.md")
    with pytest.raises(errors.Conflict):
        await client.write("viking://resources/dup.md", "a", mode="create")
        await client.write("viking://resources/dup.md", "b", mode="create")
    async def ignore(msg: Any) -> None:  # a responder that never replies
        return None

    silent = await client.nc.subscribe("silent.v1.search.find", cb=ignore)
    with pytest.raises(errors.DeadlineExceeded):

        await SkaldClient(client.nc, "silent", timeout_s=0.2).find("x")
    await silent.unsubscribe()
    lost = SkaldClient(client.nc, "no-such-prefix", retries=False)
    with pytest.raises(errors.Unavailable):
        await lost.health()
    assert lost.retried == 0
    patient = SkaldClient(client.nc, "no-such-prefix", timeout_s=1.0)  # retries inside its deadline, then says so
    with pytest.raises(errors.Unavailable):
        await patient.health()
    assert patient.retried >= 1
    for code, cls in (("UNAUTHENTICATED", errors.Unauthenticated), ("INTERNAL", errors.Internal),
                      ("SOMETHING_NEW", errors.SkaldError)):
        err = errors.from_wire(code, "m", {"k": 1})
        assert isinstance(err, cls) and err.details == {"k": 1}


async def test_sync_wrapper(skald: Any, nats_url: str) -> None:
    def work() -> tuple[int, str]:
        with SyncSkaldClient(nats_url, prefix=skald.cfg.prefix, user="sync-user") as sk:
            sk.remember("entities", "The sync client works from plain threads.")
            hits = sk.find("sync client threads")
            return hits.total, sk.health().status

    total, status = await asyncio.to_thread(work)
    assert total >= 1 and status == "ok"


async def test_search_takes_its_mode_and_answers_with_that_modes_reply(skald: Any, nats_url: str) -> None:
    """The README presents context and bootstrap as modes of `search`: the client's `search` takes
    `mode` and returns the reply that mode gives, from the sync client as from the async one."""
    def work() -> tuple[Any, Any, Any]:
        with SyncSkaldClient(nats_url, prefix=skald.cfg.prefix) as sk:
            sk.write("viking://resources/rpo.md", "# Recovery\n\nThe recovery point objective is fifteen minutes.\n")
            listed = sk.search("recovery point objective")
            block = sk.search("recovery point objective", mode="context", max_tokens=400)
            boot = sk.search(mode="bootstrap", max_tokens=400)
            return listed, block, boot

    listed, block, boot = await asyncio.to_thread(work)
    assert isinstance(listed, search_msgs.FindResult) and listed.resources
    assert isinstance(block, context_msgs.ContextResult) and "fifteen minutes" in block.rendered
    assert isinstance(boot, context_msgs.ContextResult)
    async with await SkaldClient.connect(nats_url, prefix=skald.cfg.prefix) as sk:
        with pytest.raises(errors.InvalidArgument, match="max_tokens"):
            await sk.search("recovery", max_tokens=400)  # a budget is context's: list mode refuses it
        with pytest.raises(errors.InvalidArgument, match="no query"):
            await sk.search("recovery", mode="bootstrap")


async def test_add_resource_waits_by_default_so_a_find_right_after_sees_it(skald: Any, nats_url: str) -> None:
    """As the CLI does: the reply comes once the resource is findable; `wait=False` queues it and
    `job()` follows it to its end."""
    async with await SkaldClient.connect(nats_url, prefix=skald.cfg.prefix) as sk:
        done = await sk.add_resource(content="# Pager\n\nThe pager rotation changes on Mondays.\n", name="pager.md")
        assert done.status == "done"
        found = await sk.find("when does the pager rotation change", limit=3)
        assert found.resources and found.resources[0].uri == "viking://resources/pager.md"
        queued = await sk.add_resource(content="# Rota\n\nNights are covered by Ada.\n", name="rota.md", wait=False)
        assert queued.status == "queued"
        assert (await sk.job(queued.job_id, wait=True)).status == "done"
        with pytest.raises(errors.NotFound):  # an id never given is not a job still running
            await sk.job("0" * 32, wait=True)
