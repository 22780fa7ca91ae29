"""Sessions on the in-memory bus: the acceptance table of session context (docs/design/sessions.md),
Phase 2 against a model server (restarts, several workers and JetStream outages are
`tests/worker/test_sessions.py`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from skald.messages import errors
from support.sessions import Model, add, ids, turn, until


async def test_lifecycle_validation_and_idempotent_add(deploy: Callable[..., Any]) -> None:
    _, c = await deploy()
    info = await c.call("sessions.create", {"session_id": "s1"})
    assert info["uri"] == "viking://user/default/sessions/s1"
    r1 = await add(c, "s1", "user", "hello", id="client-1")
    r2 = await add(c, "s1", "user", "hello again", id="client-1")
    assert not r1["duplicate"] and r2["duplicate"] and r2["total_message_count"] == 1
    with pytest.raises(errors.InvalidArgument):
        await c.call("sessions.commit", {"session_id": "s1", "keep_recent_turn_count": 2})
    with pytest.raises(errors.InvalidArgument):
        await c.call("sessions.add_message", {"session_id": "s1", "role": "system", "parts": [{"type": "text",
                                                                                            "text": "x"}]})
    with pytest.raises(errors.InvalidArgument):
        await c.call("sessions.add_message", {"session_id": "s1", "role": "user", "parts": []})
    for op in ("sessions.get", "sessions.context", "sessions.archives", "sessions.delete"):
        with pytest.raises(errors.NotFound):
            await c.call(op, {"session_id": "nope"})
    with pytest.raises(errors.NotFound):
        await c.call("sessions.commit", {"session_id": "nope"})
    listed = await c.call("sessions.list")
    assert [s["session_id"] for s in listed["sessions"]] == ["s1"]
    await c.call("sessions.create", {"session_id": "empty"})
    skipped = await c.call("sessions.commit", {"session_id": "empty"})
    assert skipped["status"] == "skipped" and skipped["reason"]
    assert (await c.call("sessions.delete", {"session_id": "empty"}))["deleted"]


async def test_two_rapid_pending_commits_keep_both_raws(deploy: Callable[..., Any], model: Model) -> None:
    model.delay = 1.5
    _, c = await deploy(llm_base_url=model.stub.url)
    await turn(c, "s", 1)
    a1 = await c.call("sessions.commit", {"session_id": "s"})
    await turn(c, "s", 2)
    a2 = await c.call("sessions.commit", {"session_id": "s"})
    await turn(c, "s", 3)
    assert a1["status"] == a2["status"] == "accepted" and a1["archive_id"] != a2["archive_id"]
    ctx = await c.call("sessions.context", {"session_id": "s"})
    assert ids(ctx) == [f"msg_{i:08d}" for i in range(1, 7)]
    assert ctx["stats"]["pending"] == 2 and ctx["latest_archive_overview"] == ""
    await until(c, "s", ["completed", "completed"])
    ctx = await c.call("sessions.context", {"session_id": "s"})
    assert ids(ctx) == ["msg_00000005", "msg_00000006"] and "billing" in ctx["latest_archive_overview"]


@pytest.mark.parametrize("mode,stage", [("fail", "llm"), ("hang", "llm"), ("malformed", "parse"),
                                        ("wrong_count", "validate")])
async def test_phase2_model_failures(deploy: Callable[..., Any], model: Model, mode: str, stage: str) -> None:
    model.mode = mode
    _, c = await deploy(llm_base_url=model.stub.url, llm_timeout_s=0.5)
    await add(c, "s", "user", "investigate")
    for i in range(6):
        await add(c, "s", "assistant", f"step {i} " + "detail " * 200)
    r = await c.call("sessions.commit", {"session_id": "s", "retention_mode": "turn_budget",
                                         "retained_message_token_budget": 800, "wait": True}, timeout_s=30)
    assert r["phase2"] == "failed"
    arch = (await c.call("sessions.archives", {"session_id": "s"}))["archives"][0]
    expect = "parse" if mode == "wrong_count" else stage
    assert arch["state"] == "failed" and arch["failure"]["stage"] == expect
    ctx = await c.call("sessions.context", {"session_id": "s"})
    assert ids(ctx) == [f"msg_{i:08d}" for i in range(1, 8)]  # nothing lost, no checkpoint
    assert not any(m.get("message_kind") == "checkpoint" for m in ctx["messages"])


async def test_oversized_turn_becomes_user_checkpoint_and_raw_tail(deploy: Callable[..., Any]) -> None:
    _, c = await deploy()
    await add(c, "s", "user", "find why the pool is exhausted")
    for i in range(10):
        await c.call("sessions.add_message", {"session_id": "s", "role": "assistant", "parts": [
            {"type": "text", "text": f"checking metric {i}"},
            {"type": "tool", "tool_id": f"t{i}", "tool_name": "query", "tool_output": f"value {i} " * 150,
             "tool_status": "completed"}]})
    r = await c.call("sessions.commit", {"session_id": "s", "retention_mode": "turn_budget",
                                         "retained_message_token_budget": 1200, "wait": True})
    assert r["phase2"] == "completed" and r["plan"]["turn_anchor"] == "msg_00000001"
    ctx = await c.call("sessions.context", {"session_id": "s"})
    msgs = ctx["messages"]
    assert msgs[0]["id"] == "msg_00000001" and msgs[1]["message_kind"] == "checkpoint"
    assert msgs[1]["parts"][0]["uri"].endswith("/history/archive_001")
    assert "checking metric 0" in msgs[1]["parts"][0]["abstract"]
    assert msgs[-1]["id"] == "msg_00000011" and ctx["stats"]["checkpoints"] == 1


async def test_twelve_big_tool_outputs_are_externalised_per_turn(deploy: Callable[..., Any]) -> None:
    _, c = await deploy()
    await add(c, "s", "user", "scan the logs")
    for i in range(12):
        await c.call("sessions.add_message", {"session_id": "s", "role": "assistant", "parts": [
            {"type": "tool", "tool_id": f"t{i}", "tool_name": "grep", "tool_output": f"{i:02d}" * 5000,
             "tool_status": "completed"}]})
    await add(c, "s", "user", "thanks")
    await c.call("sessions.commit", {"session_id": "s", "retention_mode": "turn_budget",
                                     "keep_recent_turn_count": 1, "wait": True})
    arch = await c.call("fs.read", {"uri": "viking://~/sessions/s/history/archive_001/messages.jsonl"})
    tools = [p for line in arch["content"].splitlines() for p in json.loads(line)["parts"] if p["type"] == "tool"]
    out = [p for p in tools if p.get("tool_output_uri")]
    assert len(out) == 3 and all(p["tool_output_chars"] == 10_000 and p["tool_output_truncated"] for p in out)
    full = await c.call("fs.read", {"uri": out[0]["tool_output_uri"]})
    assert len(full["content"]) == 10_000


async def test_session_context_fits_a_token_budget(deploy: Callable[..., Any]) -> None:
    _, c = await deploy()
    for n in range(20):
        await turn(c, "s", n)
    full = await c.call("sessions.context", {"session_id": "s"})
    fit = await c.call("sessions.context", {"session_id": "s", "max_tokens": 64})
    assert full["stats"]["trimmed_messages"] == 0 and len(full["messages"]) == 40
    assert 0 < len(fit["messages"]) < 40 and fit["stats"]["trimmed_messages"] == 40 - len(fit["messages"])
    assert fit["stats"]["estimated_tokens"] <= 64 and ids(fit) == ids(full)[-len(fit["messages"]):]


async def test_a_retried_add_with_the_same_request_id_is_stored_once(deploy: Callable[..., Any]) -> None:
    """The client's idempotency key: the retry is answered with the first attempt's message."""
    _, c = await deploy(actors=("session", "archive", "indexer"))
    first = await c.add_message("idem", "user", "hello", request_id="req-1")
    again = await c.add_message("idem", "user", "hello", request_id="req-1")
    other = await c.add_message("idem", "user", "hello")  # the client makes its own key
    assert again.duplicate and again.message_id == first.message_id
    assert not other.duplicate and other.message_id != first.message_id
    ctx = await c.session_context("idem")
    assert [m.id for m in ctx.messages] == [first.message_id, other.message_id]
    with pytest.raises(errors.InvalidArgument):
        await c.call("sessions.add_message", {"session_id": "idem", "role": "user", "request_id": "bad key!",
                                              "parts": [{"type": "text", "text": "x"}]})


async def test_a_message_sent_right_behind_a_commit_is_kept_on_disk(deploy: Callable[..., Any]) -> None:
    """A commit answers before root is rewritten without what it archived; a message already on
    its way must then wait for that rewrite, or the rename would drop its line from the disk."""
    w, c = await deploy(actors=("session",))
    sent: list[str] = []
    for r in range(12):
        for i in range(2):
            await add(c, "behind", "user", f"round {r} message {i}", id=f"r{r}m{i}")
            sent.append(f"r{r}m{i}")
        done = await asyncio.gather(c.commit("behind"), add(c, "behind", "user", f"round {r} late", id=f"r{r}late"))
        sent.append(f"r{r}late")
        assert done[0].status == "accepted"
    assert (await c.call("sessions.get", {"session_id": "behind"}))["total_message_count"] == len(sent)
    sdir = "accounts/default/user/default/sessions/behind"
    files = [*(f"{sdir}/history/{e.name}/messages.jsonl" for e in w.ns.tree.list(f"{sdir}/history")),
             f"{sdir}/messages.jsonl"]
    stored = [json.loads(x)["id"] for f in files for x in w.read_text(f).splitlines() if x.strip()]
    assert sorted(stored) == sorted(sent)  # each once: none lost to a rename, none archived twice


async def test_a_session_file_that_cannot_be_written_refuses_only_its_own_adds(deploy: Callable[..., Any]) -> None:
    """Adds of many sessions share one group-commit batch; a file that cannot be appended to
    (here a directory stands in its place) refuses its own caller only: every other caller of the
    batch is answered accepted and its line is on disk once."""
    w, c = await deploy()
    good = [f"g{i}" for i in range(20)]
    for sid in (*good, "bad"):
        await add(c, sid, "user", "first")
    root = "accounts/default/user/default/sessions"
    w.ns.tree.remove(f"{root}/bad/messages.jsonl")
    w.ns.tree.mkdir(f"{root}/bad/messages.jsonl")
    outcomes = await asyncio.gather(*(add(c, sid, "user", f"second of {sid}") for sid in (*good, "bad")),
                                    return_exceptions=True)
    assert isinstance(outcomes[-1], errors.SkaldError)
    assert all(isinstance(o, dict) and o["total_message_count"] == 2 for o in outcomes[:-1]), outcomes
    for sid in good:
        lines = w.read_text(f"{root}/{sid}/messages.jsonl").splitlines()
        assert [json.loads(x)["parts"][0]["text"] for x in lines] == ["first", f"second of {sid}"]


async def test_a_session_list_counts_what_is_stored_and_recall_says_when_it_created_one(
        deploy: Callable[..., Any], tmp_path: Any) -> None:
    """A restarted deployment lists a committed session with its messages and archives (its meta
    is not rewritten per message, so it cannot say), and a recall naming a session that did not
    exist creates it and says so, once."""
    _, c = await deploy(data_dir=tmp_path / "d")
    await add(c, "s1", "user", "we deploy caddy on port 1935")
    await add(c, "s1", "assistant", "noted")
    await c.call("sessions.commit", {"session_id": "s1", "wait": True})
    await add(c, "s1", "user", "and nginx goes")
    first = await c.call("search.recall", {"query": "caddy", "session_id": "typo"})
    again = await c.call("search.recall", {"query": "caddy", "session_id": "typo"})
    assert first["stats"]["session_created"] and "session_created" not in again["stats"]
    _, restarted = await deploy(data_dir=tmp_path / "d")
    listed = {s["session_id"]: s for s in (await restarted.call("sessions.list"))["sessions"]}
    s1 = listed["s1"]
    assert (s1["total_message_count"], s1["message_count"], s1["commit_count"], s1["archives"]) == (3, 1, 1, 1)
    assert listed["typo"]["total_message_count"] == 0
