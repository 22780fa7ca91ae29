"""SIGKILL real session/archive workers at chosen steps of Phase 2: no model call repeated for a
journaled answer, and a keyed memory killed between its version and its new text keeps one of
each. Random points across every write path are the crash campaign's
(test_crash_campaign.py, bench/crash_campaign.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from skald.actors.archive.phase2 import without_source
from skald.messages import errors
from skald.runtime.client.api import SkaldClient
from support import processes
from support.processes import reap, wait_ready
from support.stubs import ModelStub, phase2_answer


def worker(url: str, data: Path, prefix: str, fault: str = "", llm: str = "") -> subprocess.Popen[str]:
    return processes.worker(url, data, prefix, "session,archive,indexer", lease_ttl_s="1", work_ack_wait_s="1",
                            fault=fault, llm_base_url=llm, snapshot_interval_s="30")


async def call(c: SkaldClient, op: str, body: dict[str, Any]) -> Any:
    """One attempt; None when the worker died under it."""
    try:
        return await c.call(op, body, timeout_s=1.0)
    except (errors.DeadlineExceeded, errors.Unavailable, errors.Internal):
        return None


async def settle(c: SkaldClient, sid: str, timeout: float = 40.0) -> list[dict]:
    """Archives once none is pending (Phase 2 redelivered to the surviving worker)."""
    archives: list[dict] = []
    for _ in range(int(timeout / 0.2)):
        try:
            archives = (await c.call("sessions.archives", {"session_id": sid}, timeout_s=3.0))["archives"]
        except (errors.DeadlineExceeded, errors.Unavailable, errors.NotFound):
            await asyncio.sleep(0.2)
            continue
        if all(a["state"] in ("completed", "failed") for a in archives):
            return archives
        await asyncio.sleep(0.2)
    raise AssertionError(f"{sid}: archives never settled: {[a['state'] for a in archives]}")


async def test_journaled_model_answer_is_not_requested_again(nats_url: str, tmp_path: Path) -> None:
    calls = {"phase2": 0}

    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        if "working memory" in body["messages"][0]["content"]:
            calls["phase2"] += 1
            return 200, phase2_answer(body["messages"][1]["content"]), 0
        return 200, {"choices": [{"message": {"content": "summary"}}], "usage": {}}, 0

    stub = ModelStub(respond)
    data, prefix = tmp_path / "data", "journal"
    procs = [worker(nats_url, data, prefix, "archive.after_journal", stub.url)]
    try:
        wait_ready(procs[0])
        async with await SkaldClient.connect(nats_url) as c:
            c.prefix = prefix
            for role in ("user", "assistant"):
                await c.call("sessions.add_message", {"session_id": "j", "role": role,
                                                      "parts": [{"type": "text", "text": f"{role} says hi"}]})
            # Phase 2 runs in the same process and may kill it before the commit reply leaves.
            await call(c, "sessions.commit", {"session_id": "j"})
            procs[0].wait(20)  # killed right after the answer was journaled
            assert calls["phase2"] == 1
            procs.append(worker(nats_url, data, prefix, "", stub.url))
            wait_ready(procs[1])
            archives = await settle(c, "j")
            assert [a["state"] for a in archives] == ["completed"] and calls["phase2"] == 1
    finally:
        reap(procs)
        stub.close()


async def test_memory_update_killed_between_version_and_write_keeps_one_of_each(nats_url: str,
                                                                                tmp_path: Path) -> None:
    """SIGKILL after a keyed memory's old text was saved as a version and before its new text was
    written: the redone Phase 2 (from its journal) writes the new text, and the history holds the
    old text once; one file, nothing lost, nothing duplicated."""
    texts = ["Prefers tea in the morning.", "Switched to coffee in the morning."]
    calls = {"n": 0}

    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        if "working memory" not in body["messages"][0]["content"]:
            return 200, {"choices": [{"message": {"content": "summary"}}], "usage": {}}, 0
        calls["n"] += 1
        text = texts[min(calls["n"], 2) - 1]
        return 200, {"choices": [{"message": {"content": json.dumps({
            "overview": "# WM", "checkpoint_summaries": [],
            "memories": [{"category": "preferences", "key": "morning drink", "content": text}]})}}],
            "usage": {}}, 0

    stub = ModelStub(respond)
    data, prefix = tmp_path / "data", "crashmerge"
    procs = [worker(nats_url, data, prefix, "", stub.url)]
    prefs = data / "accounts/default/user/default/memories/preferences"
    try:
        wait_ready(procs[0])
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            for n in (1, 2):
                if n == 2:
                    procs[-1].terminate()
                    procs[-1].wait(20)
                    procs.append(worker(nats_url, data, prefix, "archive.after_history", stub.url))
                    wait_ready(procs[-1])
                for role in ("user", "assistant"):
                    await call(c, "sessions.add_message", {"session_id": "m", "role": role,
                                                           "parts": [{"type": "text", "text": f"{role} {n}"}]})
                await call(c, "sessions.commit", {"session_id": "m", "wait": n == 1})
            procs[-1].wait(20)  # killed between the version and the write
            assert without_source((prefs / "morning-drink.md").read_text()) == texts[0]
            procs.append(worker(nats_url, data, prefix, "", stub.url))
            wait_ready(procs[-1])
            archives = await settle(c, "m")
            assert [a["state"] for a in archives] == ["completed", "completed"] and calls["n"] == 2
            assert sorted(p.name for p in prefs.iterdir() if not p.name.startswith(".")) == ["morning-drink.md"]
            assert without_source((prefs / "morning-drink.md").read_text()) == texts[1]
            hist = await c.call("memories.history", {"uri": "viking://~/memories/preferences/morning-drink.md"})
            assert [without_source(v["content"]) for v in hist["versions"]] == [texts[0]]
    finally:
        reap(procs)
        stub.close()


async def test_commit_killed_after_its_reply_before_root_is_tidied(nats_url: str, tmp_path: Path) -> None:
    """Phase 1 answers once the archive is durable and its job queued; root loses the archived
    messages after the reply. Killed in between, the next owner cuts root back on load: every
    message is stored once, the archive is summarised, and the next commit archives only what came
    after."""
    data, prefix = tmp_path / "data", "tidy"
    procs = [worker(nats_url, data, prefix, "commit.before_root")]
    try:
        wait_ready(procs[0])
        async with await SkaldClient.connect(nats_url) as c:
            c.prefix = prefix
            for i in range(4):
                await c.call("sessions.add_message", {"session_id": "t", "role": "user", "id": f"a{i}",
                                                      "parts": [{"type": "text", "text": f"first {i}"}]})
            await call(c, "sessions.commit", {"session_id": "t", "keep_recent_count": 1})
            procs[0].wait(20)
            sdir = data / "accounts/default/user/default/sessions/t"
            live = [json.loads(x)["id"] for x in (sdir / "messages.jsonl").read_text().splitlines() if x.strip()]
            assert live == ["a0", "a1", "a2", "a3"]  # killed before the rewrite: root still holds them
            procs.append(worker(nats_url, data, prefix))
            wait_ready(procs[1])
            await c.call("sessions.add_message", {"session_id": "t", "role": "user", "id": "b0",
                                                  "parts": [{"type": "text", "text": "after the crash"}]},
                         timeout_s=10.0)
            second = await c.call("sessions.commit", {"session_id": "t"}, timeout_s=10.0)
            assert second["archived_messages"] == 2  # a3 (kept by the first commit) and b0, nothing twice
            archives = await settle(c, "t")
            assert [a["state"] for a in archives] == ["completed", "completed"]
            stored = [json.loads(x)["id"] for f in sorted(sdir.glob("history/archive_*/messages.jsonl"))
                      for x in f.read_text().splitlines() if x.strip()]
            assert stored == ["a0", "a1", "a2", "a3", "b0"]
    finally:
        reap(procs)
