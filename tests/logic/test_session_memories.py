"""Memories a session leaves, on the in-memory bus: what its commits distil, merge, update and
forget, and what recall finds of them later, offline (the archive's Phase 2 without a model)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from skald.messages import errors
from support.sessions import Model, add, ids, states, turn
from support.stubs import ModelStub, chat


async def test_ten_commits_later_the_context_still_holds_the_first_commits_fact(
        deploy: Callable[..., Any]) -> None:
    """Working memory accumulates (offline too): each archive's overview starts from the one before."""
    _, c = await deploy()
    for n in range(10):
        await add(c, "s", "user", f"Fact {n}: the staging database lives on host db{n:02d}.")
        await add(c, "s", "assistant", "Noted.")
        r = await c.call("sessions.commit", {"session_id": "s", "wait": True})
        assert r["phase2"] == "completed"
    ctx = await c.call("sessions.context", {"session_id": "s"})
    overview = ctx["latest_archive_overview"]
    assert "Fact 0: the staging database lives on host db00." in overview
    assert "Fact 9:" in overview and ctx["stats"]["completed"] == 10


async def test_what_both_sides_said_is_recalled_offline(deploy: Callable[..., Any]) -> None:
    """Archived messages stay findable with no model: the assistant's words too, and past any cut."""
    _, c = await deploy()
    for n in range(25):
        await add(c, "s", "user", f"Filler question number {n} about nothing in particular.")
        await add(c, "s", "assistant", f"Filler answer number {n}.")
    await add(c, "s", "user", "Where did we put the backup key?")
    await add(c, "s", "assistant", "The backup key is taped under the blue kayak in the garage.")
    r = await c.call("sessions.commit", {"session_id": "s", "wait": True})
    # A commit that waits answers once its memories are findable: the next search sees them.
    assert r["phase2"] == "completed" and r["memories"] == "indexed" and r["index_seq"] > 0
    block = await c.call("search.search", {"query": "backup key blue kayak", "mode": "context"})
    assert "taped under the blue kayak" in block["rendered"]


async def test_big_tool_output_is_externalised_when_added_not_at_commit(deploy: Callable[..., Any]) -> None:
    """The Turn rule applies at add_message: an oversized output never sits in messages.jsonl."""
    w, c = await deploy()
    await add(c, "s", "user", "run the report")
    big = "row,value\n" + "x" * 300_000  # under the 1 MiB request limit, far over the Turn rule
    await c.call("sessions.add_message", {"session_id": "s", "role": "assistant", "parts": [
        {"type": "tool", "tool_id": "t1", "tool_name": "sh", "tool_output": big, "tool_status": "completed"}]})
    assert len(w.read_text("accounts/default/user/default/sessions/s/messages.jsonl")) < 10_000
    part = (await c.call("sessions.context", {"session_id": "s"}))["messages"][-1]["parts"][0]
    assert part["tool_output_truncated"] and part["tool_output_chars"] == len(big)
    assert (await c.call("fs.read", {"uri": part["tool_output_uri"]}))["content"] == big


async def test_an_archive_that_keeps_failing_is_quarantined_and_can_be_retried(deploy: Callable[..., Any],
                                                                             model: Model) -> None:
    """A failure that recurs cannot poison a session: after three failed attempts the archive is set
    aside (its raw leaves the live context), later archives complete again, and a retry once the
    model recovers completes it."""
    model.mode = "poison"  # the model fails on any prompt holding archive_001's messages
    _, c = await deploy(llm_base_url=model.stub.url)
    await add(c, "s", "user", "POISON pill that breaks the model")
    await add(c, "s", "assistant", "ok")
    phases = [(await c.call("sessions.commit", {"session_id": "s", "wait": True}))["phase2"]]
    for n in range(2, 5):
        await turn(c, "s", n)
        phases.append((await c.call("sessions.commit", {"session_id": "s", "wait": True}))["phase2"])
    assert phases == ["failed", "failed", "failed", "completed"]
    archives = (await c.call("sessions.archives", {"session_id": "s"}))["archives"]
    assert [a["state"] for a in archives] == ["quarantined", "failed", "failed", "completed"]
    assert "failed 3 times" in archives[0]["quarantine"]["reason"]
    assert archives[3]["coverage"]["covered_failed_archives"] == ["archive_002", "archive_003"]
    ctx = await c.call("sessions.context", {"session_id": "s"})
    assert ids(ctx) == [] and "POISON" not in json.dumps(ctx)  # bounded: the poison left the context
    with pytest.raises(errors.Conflict):
        await c.call("sessions.retry_archive", {"session_id": "s", "archive_id": "archive_004"})
    model.mode = "ok"
    r = await c.call("sessions.retry_archive", {"session_id": "s", "archive_id": "archive_001"})
    assert r["state"] == "pending"
    for _ in range(100):
        if (await states(c, "s"))[0] == "completed":
            break
        await asyncio.sleep(0.1)
    assert await states(c, "s") == ["completed", "failed", "failed", "completed"]


async def test_a_changed_preference_updates_its_memory_and_keeps_the_old_text(deploy: Callable[..., Any]) -> None:
    """Keyed memories merge: the same fact twice is one memory; a changed preference replaces the
    file's text (the previous version in its history) instead of adding a second file."""
    said = ["Prefers oat milk in coffee.", "prefers OAT milk in coffee", "Now takes coffee black, no milk."]
    calls: list[str] = []

    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        if "working memory" not in body["messages"][0]["content"]:
            return 200, chat("A short summary."), 0
        calls.append(body["messages"][1]["content"])
        text = said[min(len(calls), len(said)) - 1]
        return 200, chat(json.dumps({"overview": "# WM\n\nCoffee.", "checkpoint_summaries": [], "memories": [
            {"category": "preferences", "key": "coffee", "op": "update", "content": text}]})), 0

    stub = ModelStub(respond)
    try:
        w, c = await deploy(llm_base_url=stub.url)
        for n in range(3):
            await turn(c, "s", n)
            assert (await c.call("sessions.commit", {"session_id": "s", "wait": True}))["phase2"] == "completed"
        prefs = "accounts/default/user/default/memories/preferences"
        assert sorted(e.name for e in w.ns.tree.list(prefs) if not e.name.startswith(".")) == ["coffee.md"]
        # The model's memory says where it came from: the session and the archived messages.
        text = w.read_text(f"{prefs}/coffee.md")
        assert re.fullmatch(r"Now takes coffee black, no milk\.\n\n_Source: session s, messages msg_\d+ to msg_\d+\._",
                            text), text
        hist = await c.call("memories.history", {"uri": "viking://~/memories/preferences/coffee.md"})
        assert hist["current"] == text
        assert [v["content"].split("\n")[0] for v in hist["versions"]] == ["Prefers oat milk in coffee."]
        assert "preferences/coffee: Prefers oat milk" in calls[1]  # the model saw the existing memory
    finally:
        stub.close()


async def test_a_waiting_commit_reports_memories_pending_when_its_deadline_comes_first(
        deploy: Callable[..., Any]) -> None:
    """No indexer serves the memories job: the commit still answers at its deadline, with Phase 2
    completed and the memories reported pending (not failed, not hanging)."""
    _, c = await deploy(actors=("session", "archive"))
    await add(c, "s", "user", "The release train leaves on Thursdays.")
    await add(c, "s", "assistant", "Noted: Thursdays.")
    r = await c.call("sessions.commit", {"session_id": "s", "wait": True}, timeout_s=5.0)
    assert r["phase2"] == "completed" and r["memories"] == "pending" and "index_seq" not in r


async def test_offline_phase2_merges_preferences_and_entities_across_archives(deploy: Callable[..., Any]) -> None:
    """Without a model, what the user says they like and the names the conversation is about become
    keyed memories with their day and message ids; a later archive adds its new lines to the same
    files (the previous text kept as a version), and a fact said again adds nothing."""
    w, c = await deploy()
    await add(c, "s", "user", "I love hiking in the Alps. My dog Rex always comes along.")
    await add(c, "s", "assistant", "Rex must enjoy that! Does Rex carry a pack?")
    assert (await c.call("sessions.commit", {"session_id": "s", "wait": True}))["phase2"] == "completed"
    await add(c, "s", "user", "I love hiking in the Alps! Rex got tired on the last trip.")
    await add(c, "s", "assistant", "Poor Rex. A shorter route next time?")
    assert (await c.call("sessions.commit", {"session_id": "s", "wait": True}))["phase2"] == "completed"
    mem = "accounts/default/user/default/memories"
    pref = w.read_text(f"{mem}/preferences/hiking-alps.md")
    assert pref.startswith("# Preference: hiking alps\n\n- ") and pref.count("\n- ") == 1  # said twice, kept once
    assert "user: I love hiking in the Alps. (message msg_00000001)" in pref
    rex = w.read_text(f"{mem}/entities/rex.md")
    assert rex.startswith("# Entity: Rex\n") and rex.count("\n- ") == 5
    assert "(message msg_00000002)" in rex and "(message msg_00000004)" in rex
    hist = await c.call("memories.history", {"uri": "viking://~/memories/entities/rex.md"})
    assert len(hist["versions"]) == 1 and hist["versions"][0]["content"].count("\n- ") == 3
    found = await c.call("search.find", {"query": "Rex the dog got tired", "context_type": "memory", "level": 2})
    assert "viking://user/default/memories/entities/rex.md" in [m["uri"] for m in found["memories"]]


async def test_memories_update_forget_and_history(deploy: Callable[..., Any]) -> None:
    """The same fact written twice (in other words) is one memory; update and forget keep versions."""
    _, c = await deploy()
    a = await c.call("memories.write", {"category": "entities", "content": "Vega is the staging host in rack 4."})
    b = await c.call("memories.write", {"category": "entities", "content": "vega is the staging host, in rack 4"})
    assert a["root_uri"] == b["root_uri"]
    uri = a["root_uri"]
    await c.call("memories.update", {"uri": uri, "content": "Vega moved to rack 7."})
    found = await c.call("search.find", {"query": "which rack is vega in"})
    assert [m["abstract"] for m in found["memories"] if m["uri"] == uri] == ["Vega moved to rack 7."]
    await c.call("memories.delete", {"uri": uri})
    assert not [m for m in (await c.call("search.find", {"query": "vega rack"}))["memories"] if m["uri"] == uri]
    hist = await c.call("memories.history", {"uri": uri})
    assert hist["current"] is None
    assert [v["reason"] for v in hist["versions"]] == ["merge", "update", "delete"]
    assert hist["versions"][-1]["content"] == "Vega moved to rack 7."
    with pytest.raises(errors.InvalidArgument):
        await c.call("memories.delete", {"uri": "viking://resources/not-a-memory.md"})
    with pytest.raises(errors.NotFound):
        await c.call("memories.update", {"uri": "viking://~/memories/entities/nope.md", "content": "x"})
