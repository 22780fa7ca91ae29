"""search mode="list" on the in-memory bus: descent, plans, rerank and intent fuses, decay, keywords."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from skald.messages import errors
from skald.store.memory_tree import MemoryTree
from skald.store.treeport import Tree
from skald.store.uri import Identity
from support.corpus import write_files
from support.memory_deploy import MemoryClient, MemoryDeployment
from support.stubs import ModelStub, chat

DEEP = "viking://resources/l1/l2/l3/l4/target.md"


async def seed_tree(c: MemoryClient) -> None:
    others = {f"viking://resources/other{i}/note.md": f"# Note {i}\n\nUnrelated bakery inventory item {i}."
              for i in range(6)}
    await write_files(c, {DEEP: "# Glacier survey\n\nMeltwater channels carve moulins.", **others})


def hits(r: dict) -> list[dict]:
    return r["memories"] + r["resources"] + r["skills"]


async def test_thinking_descends_four_levels_with_trajectory(deploy: Callable[..., Any]) -> None:
    _, c = await deploy()
    await seed_tree(c)
    r = await c.call("search.search", {"query": "meltwater moulins glacier", "include_provenance": True,
                                       "level": 2})
    assert hits(r)[0]["uri"] == DEEP
    assert r["query_plan"]["queries"][0]["query"] == "meltwater moulins glacier"
    traj = r["provenance"]["queries"][0]["trajectory"]
    entered = [e["uri"] for rnd in traj["rounds"] for e in rnd]
    for d in ("viking://resources/l1", "viking://resources/l1/l2", "viking://resources/l1/l2/l3",
              "viking://resources/l1/l2/l3/l4"):
        assert d in entered
    assert traj["convergence"] in ("topk_stable", "stagnant", "queue_empty")
    fast_w, fast = await deploy(default_search_mode="fast")
    await seed_tree(fast)
    r2 = await fast.call("search.search", {"query": "meltwater moulins glacier", "include_provenance": True})
    assert r2["provenance"]["queries"][0]["mode"] == "quick"


@pytest.mark.parametrize("mode", ["500", "garbage", "hang", "short"])
async def test_rerank_failures_fall_back_and_are_counted(deploy: Callable[..., Any], mode: str) -> None:
    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        if mode == "500":
            return 500, {"error": "boom"}, 0
        if mode == "garbage":
            return 200, b"<html>not json", 0
        if mode == "hang":
            return 200, {"results": []}, 3.0
        return 200, {"results": [{"index": 0, "relevance_score": 0.9}]}, 0

    stub = ModelStub(respond)
    try:
        _, c = await deploy(rerank_base_url=stub.url, rerank_timeout_s=0.3)
        await seed_tree(c)
        r = await c.call("search.search", {"query": "meltwater moulins glacier", "level": 2})
        assert hits(r)[0]["uri"] == DEEP
        stats = (await c.call("system.stats"))["retrieval"]
        assert stats["rerank_used"] == 1 and stats["rerank_fallback"] == 1 and stub.calls
    finally:
        stub.close()


async def test_working_rerank_decides_the_order(deploy: Callable[..., Any]) -> None:
    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        docs = body["documents"]
        return 200, {"results": [{"index": i, "relevance_score": 0.99 if "bakery inventory item 3" in d else 0.01}
                                 for i, d in enumerate(docs)]}, 0

    stub = ModelStub(respond)
    try:
        _, c = await deploy(rerank_base_url=stub.url)
        await seed_tree(c)
        r = await c.call("search.search", {"query": "meltwater moulins glacier", "level": 2})
        assert hits(r)[0]["uri"] == "viking://resources/other3/note.md"
        stats = (await c.call("system.stats"))["retrieval"]
        assert stats["rerank_used"] == 1 and stats["rerank_fallback"] == 0
        assert all(len(b["documents"]) <= 100 for _, b in stub.calls)
    finally:
        stub.close()


def write_session(w: MemoryDeployment, sid: str, msgs: list[tuple[str, str]], overview: str = "") -> None:
    d = f"accounts/default/user/default/sessions/{sid}"
    w.write_text(f"{d}/messages.jsonl", "".join(json.dumps({"id": f"m{i}", "role": r, "parts": [
        {"type": "text", "text": t}]}) + "\n" for i, (r, t) in enumerate(msgs)))
    if overview:
        w.ns.tree.write_dir(f"{d}/history/archive_001", {".overview.md": overview.encode(), ".done": b"{}"})


async def test_intent_plan_used_and_fused(deploy: Callable[..., Any]) -> None:
    plan = {"reasoning": "needs the survey", "queries": [
        {"query": "glacier meltwater survey", "context_type": "resource", "intent": "find it", "priority": 1},
        {"query": "bakery inventory", "context_type": "resource", "priority": 2},
        {"query": "third", "context_type": "memory", "priority": 3}]}
    stub = ModelStub(lambda p, b: (200, chat(json.dumps(plan)), 0))
    try:
        w, c = await deploy(llm_base_url=stub.url)
        await seed_tree(c)
        write_session(w, "s1", [("user", "we are studying ice sheets"), ("assistant", "ok")], "Ice work.")
        r = await c.call("search.search", {"query": "what about that?", "session_id": "s1", "level": 2})
        qp = r["query_plan"]
        assert qp["status"] == "planned" and len(qp["queries"]) == 3
        assert qp["queries"][0]["query"] == "what about that?"
        assert DEEP in [h["uri"] for h in hits(r)]
        prompt = next(b["messages"][1]["content"] for _, b in stub.calls
                      if "plan retrieval" in b["messages"][0]["content"])
        assert "Ice work." in prompt and "[user]: we are studying ice sheets" in prompt
    finally:
        stub.close()


@pytest.mark.parametrize("answer,status", [("hang", "timeout"), ("garbage", "failed"), ("zero", "planned")])
async def test_intent_fuse_and_failures(deploy: Callable[..., Any], answer: str, status: str) -> None:
    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        planner = "plan retrieval" in body["messages"][0]["content"]
        if answer == "hang" and planner:
            return 200, chat("{}"), 3.0
        if not planner:
            return 200, chat("A summary."), 0
        if answer == "garbage":
            return 200, chat("I think you should search for glaciers!"), 0
        return 200, chat('{"reasoning": "greeting", "queries": []}'), 0

    stub = ModelStub(respond)
    try:
        w, c = await deploy(llm_base_url=stub.url, recall_intent_timeout_s=0.4)
        await seed_tree(c)
        write_session(w, "s2", [("user", "hello there")])
        # The stub hangs for 3 s; the request's own deadline (2 s) is the proof that the fuse (0.4 s) fired.
        r = await c.call("search.search", {"query": "meltwater moulins glacier", "session_id": "s2", "level": 2},
                         timeout_s=2.0)
        assert r["query_plan"]["status"] == status
        if status == "planned":
            assert r["query_plan"]["queries"] == [] and r["total"] == 0
        else:
            assert hits(r)[0]["uri"] == DEEP and r["query_plan"]["error"]
    finally:
        stub.close()


def age(tree: Tree, key: str, when: float) -> None:
    """A file's modification time set back to `when`, on whichever tree holds it."""
    if isinstance(tree, MemoryTree):
        tree.files[key] = (tree.files[key][0], when)
    else:
        os.utime(tree.path(key), (when, when))  # type: ignore[attr-defined]


async def test_events_time_decay_orders_by_age(deploy: Callable[..., Any]) -> None:
    w, c = await deploy()
    old = await c.call("memories.write", {"category": "events", "content": "Team offsite in Porto.", "name": "a.md"})
    age(w.ns.tree, w.ns.resolve(old["root_uri"], Identity()).key, time.time() - 60 * 86400)
    await c.call("fs.mv", {"from_uri": old["root_uri"], "to_uri": old["root_uri"].replace("a.md", "old.md")})
    await c.call("memories.write", {"category": "events", "content": "Team offsite in Porto!", "name": "new.md"})
    body = {"query": "team offsite Porto", "context_type": "memory", "level": 2}
    plain = await c.call("search.search", body)
    assert {m["uri"].rsplit("/", 1)[1] for m in plain["memories"]} == {"old.md", "new.md"}
    r = await c.call("search.search", {**body, "events_time_decay_protection": "7d"})
    first, second = r["memories"][0], r["memories"][1]
    assert first["uri"].endswith("new.md") and first["time_score"] == 1.0
    assert second["uri"].endswith("old.md") and second["time_score"] < 0.5
    assert second["score"] == pytest.approx(second["origin_score"] * second["time_score"], abs=1e-5)


async def test_keywords_find_exact_tokens(deploy: Callable[..., Any]) -> None:
    _, c = await deploy()
    await c.call("fs.write", {"uri": "viking://resources/logs/auth.log",
                              "content": "startup ok\nfailure code ERR_AUTH_42 on login\n" + "noise " * 300})
    await c.call("fs.write", {"uri": "viking://resources/logs/other.log", "content": "ERR_DB_7 pool exhausted"})
    r = await c.call("search.search", {"query": "ERR_AUTH_42", "search_type": "keywords", "level": 2})
    assert hits(r)[0]["uri"] == "viking://resources/logs/auth.log"
    h = await c.call("search.search", {"query": "ERR_AUTH_42", "search_type": "hybrid", "level": 2})
    assert hits(h)[0]["uri"] == "viking://resources/logs/auth.log"
    # hybrid list search is find's fusion: the same scores on the same (calibrated) scale, and a
    # threshold above them leaves nothing
    f = await c.call("search.find", {"query": "ERR_AUTH_42", "level": 2})
    assert [(m["uri"], m["score"]) for m in hits(h)] == [(m["uri"], m["score"]) for m in hits(f)]
    top = hits(h)[0]["score"]
    high = await c.call("search.search", {"query": "ERR_AUTH_42", "search_type": "hybrid", "level": 2,
                                          "score_threshold": top})
    assert all(m["score"] > top for m in hits(high))
    with pytest.raises(errors.InvalidArgument):
        await c.call("search.search", {"query": " ", "search_type": "keywords"})
    # words beyond ASCII are terms too (they were dropped): a Russian error text is found by them
    await c.call("fs.write", {"uri": "viking://resources/logs/ru.log",
                              "content": "Ошибка: сервер базы данных не отвечает после перезапуска"})
    ru = await c.call("search.search", {"query": "перезапуска сервер", "search_type": "keywords", "level": 2})
    assert [m["uri"] for m in hits(ru)] == ["viking://resources/logs/ru.log"]
    # and stemmed in their row's language (Russian here): another inflection of both words finds it
    ru = await c.call("search.search", {"query": "перезапуск серверов", "search_type": "keywords", "level": 2})
    assert [m["uri"] for m in hits(ru)] == ["viking://resources/logs/ru.log"]
    # context mode is the assembler's: a deployment without one says so
    _, bare = await deploy(actors=("indexer", "retriever"))
    bare.retries = False  # the client would otherwise retry UNAVAILABLE until its deadline
    with pytest.raises(errors.Unavailable):
        await bare.call("search.search", {"query": "x", "mode": "context"})


async def test_peer_rules_in_search(deploy: Callable[..., Any]) -> None:
    _, c = await deploy()
    p1 = c.as_identity(user="dan", peer="p1")
    await p1.call("memories.write", {"category": "events", "content": "p1 signed the lease"})
    r = await p1.call("search.search", {"query": "signed the lease", "context_type": "memory", "level": 2})
    assert r["memories"][0]["uri"].startswith("viking://user/dan/peers/p1/")
    with pytest.raises(errors.PermissionDenied):
        await p1.call("search.search", {"query": "x", "target_uri": "viking://~/peers/p2/memories"})
    with pytest.raises(errors.InvalidArgument):
        await p1.call("search.search", {"query": "x", "target_uri": "viking://~/peers/p1/sessions"})


async def test_an_empty_query_lists_in_find_and_search_alike_and_context_points_elsewhere(
        client: MemoryDeployment) -> None:
    """No query: find and search both list the rows the filters select (score 0, newest first);
    a context block needs one and its refusal names the modes that do without."""
    await client.call("fs.write", {"uri": "viking://resources/ops/a.md", "content": "# A\n\nCaddy on 1935.\n"})
    await client.call("fs.write", {"uri": "viking://resources/ops/b.md", "content": "# B\n\nNginx on 80.\n"})
    body = {"query": "", "target_uri": "viking://resources/ops", "level": 2}
    found = await client.call("search.find", body)
    searched = await client.call("search.search", body)
    uris = sorted(h["uri"] for h in found["resources"])
    assert uris == ["viking://resources/ops/a.md", "viking://resources/ops/b.md"]
    assert sorted(h["uri"] for h in searched["resources"]) == uris
    assert all(h["score"] == 0.0 for h in searched["resources"])
    with pytest.raises(errors.InvalidArgument, match="bootstrap"):
        await client.call("search.search", {"query": " ", "mode": "context"})
