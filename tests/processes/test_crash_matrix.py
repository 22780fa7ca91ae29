"""The write paths' crash matrix: a real worker is SIGKILLed at each step of fs.write,
resources.add, memories.write, the ingest job that updates the index, and the dedup-ledger
write; a fresh worker on the same data then proves the invariants: no half-written file is
visible, nothing acknowledged is lost, nothing is duplicated, the index catches up with what
the tree serves by itself (a dead request's note, `store/index_changes.py`), and a client's retry
(what a client does after a timeout) converges the file tree and the index.

Sessions (add_message, commit Phase 1, Phase 2) and random points across every path are the crash
campaign's (test_crash_campaign.py, bench/crash_campaign.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from skald.messages import errors
from skald.runtime.client.api import SkaldClient
from support import processes
from support.figures import FIGURES
from support.processes import reap, unless_dead

ACTORS = "indexer,retriever,assembler,session"
WRITE_POINTS = ["tree.before_rename", "ingest.before_enqueue", "ingest.after_enqueue", "ingest.before_publish",
                "ingest.after_publish", "ingest.after_done"]
TRIED: list[str] = []


def start(url: str, data: Path, prefix: str, fault: str = "", age_s: str = "0") -> subprocess.Popen[str]:
    """A worker that finishes a dead request's move or removal as soon as it starts (no other
    worker's request can be running), or once its note is `age_s` old."""
    return processes.worker(url, data, prefix, ACTORS, ready=True, work_ack_wait_s="1", lease_ttl_s="1", fault=fault,
                            change_recovery_age_s=age_s)


async def attempt(c: SkaldClient, op: str, body: dict[str, Any]) -> Any:
    """One try; None when the worker died under it (the client cannot know whether it applied)."""
    try:
        return await c.call(op, body, timeout_s=3.0)
    except (errors.DeadlineExceeded, errors.Unavailable):
        return None


async def crash_then_recover(nats_url: str, tmp_path: Path, fault: str,
                             before: Callable[[SkaldClient], Awaitable[None]],
                             crash: Callable[[SkaldClient], Awaitable[Any]],
                             check: Callable[[SkaldClient, Path, Any], Awaitable[None]], age_s: str = "0") -> None:
    prefix = "cm" + "".join(ch for ch in fault if ch.isalnum())[:20] + str(len(TRIED))
    data = tmp_path / prefix
    procs: list[subprocess.Popen[str]] = []
    try:
        # set-up on a healthy worker, then the faulty one takes over
        healthy = start(nats_url, data, prefix)
        procs.append(healthy)
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            await before(c)
        healthy.terminate()
        healthy.wait(timeout=30)
        faulty = start(nats_url, data, prefix, fault)
        procs.append(faulty)
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            outcome = await unless_dead(faulty, crash(c))
        faulty.wait(timeout=30)
        assert faulty.returncode == -9, f"{fault} never fired (rc={faulty.returncode})"
        TRIED.append(fault)
        FIGURES["crash_points"] += 1
        procs.append(start(nats_url, data, prefix, age_s=age_s))
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            await check(c, data, outcome)
    finally:
        reap(procs)


async def rows_for(c: SkaldClient, uri: str) -> list[dict[str, Any]]:
    r = await c.call("search.find", {"query": "", "target_uri": uri, "level": 2, "limit": 100})
    return [h for h in (*r["memories"], *r["resources"], *r["skills"]) if h["uri"] == uri]


async def indexed_as(c: SkaldClient, uri: str, words: str, within_s: float = 30.0) -> list[dict[str, Any]]:
    """The file's rows once one of them holds `words` (the index caught up with the tree by itself,
    without the client writing again); what it has after `within_s` otherwise."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        rows = await rows_for(c, uri)
        if any(words in r["abstract"] for r in rows) or asyncio.get_running_loop().time() > deadline:
            return rows
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("fault", WRITE_POINTS)
async def test_fs_write_killed_at_each_step(nats_url: str, tmp_path: Path, fault: str) -> None:
    uri = "viking://resources/notes/plan.md"
    v1, v2 = "# Plan\n\nVersion one of the plan.\n", "# Plan\n\nVersion two of the plan, longer than one.\n"

    async def before(c: SkaldClient) -> None:
        await c.call("fs.write", {"uri": uri, "content": v1})

    async def crash(c: SkaldClient) -> Any:
        return await attempt(c, "fs.write", {"uri": uri, "content": v2})

    async def check(c: SkaldClient, data: Path, outcome: Any) -> None:
        content = (await c.call("fs.read", {"uri": uri}))["content"]
        assert content in (v1, v2)  # whole old or whole new, never a mix
        if outcome is not None:
            assert content == v2  # acknowledged: durable
        names = [e["name"] for e in (await c.call("fs.ls", {"uri": "viking://resources/notes"}))["entries"]]
        assert names == ["plan.md"]  # a temp file left by the kill is never served
        # Before anybody writes again, the index holds what the tree serves: a write killed
        # after the tree changed and before its job was queued is finished from its note.
        said = "Version two" if content == v2 else "Version one"
        rows = await indexed_as(c, uri, said)
        assert len(rows) == 1 and said in rows[0]["abstract"]
        await c.call("fs.write", {"uri": uri, "content": v2})  # the client's retry
        rows = await rows_for(c, uri)
        assert len(rows) == 1 and "Version two" in rows[0]["abstract"]

    await crash_then_recover(nats_url, tmp_path, fault, before, crash, check)


@pytest.mark.parametrize("fault", ["tree.before_rename", "ingest.before_enqueue", "ingest.after_enqueue",
                                   "ingest.before_publish", "ingest.after_publish", "ingest.after_done"])
async def test_memory_write_killed_at_each_step(nats_url: str, tmp_path: Path, fault: str) -> None:
    body = {"category": "preferences", "content": "Prefers oolong tea in the afternoon.", "name": "tea.md"}
    uri = "viking://user/default/memories/preferences/tea.md"

    async def before(c: SkaldClient) -> None:
        await c.call("fs.mkdir", {"uri": "viking://user/default/memories/preferences"})

    async def crash(c: SkaldClient) -> Any:
        return await attempt(c, "memories.write", body)

    async def check(c: SkaldClient, data: Path, outcome: Any) -> None:
        if outcome is not None:
            assert (await c.call("fs.read", {"uri": uri}))["content"] == body["content"]
        try:
            await c.call("fs.stat", {"uri": uri})
        except errors.NotFound:
            assert fault == "tree.before_rename"  # killed before the memory was written
        else:  # the memory stands: indexed before anybody writes it again
            assert len(await indexed_as(c, uri, "oolong")) == 1
        try:
            await c.call("memories.write", body)  # the retry
        except errors.Conflict:
            pass
        files = [e["name"] for e in (await c.call("fs.ls", {"uri": "viking://user/default/memories/preferences"}))[
            "entries"]]
        assert files == ["tea.md"]  # exactly one memory, no duplicate under another name
        assert len(await rows_for(c, uri)) == 1

    await crash_then_recover(nats_url, tmp_path, fault, before, crash, check)


@pytest.mark.parametrize("fault", ["ingest.before_enqueue", "ingest.after_enqueue", "ingest.before_publish",
                                   "ingest.after_publish", "ingest.after_done"])
async def test_resource_directory_ingest_killed_at_each_step(nats_url: str, tmp_path: Path, fault: str) -> None:
    src = tmp_path / "handbook"
    for i in range(40):
        (src / f"s{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"s{i % 4}" / f"p{i}.md").write_text(f"# Page {i}\n\nHandbook page {i}.\n")

    async def before(c: SkaldClient) -> None:
        await c.call("fs.write", {"uri": "viking://resources/warmup.md", "content": "warm"})

    async def crash(c: SkaldClient) -> Any:
        return await attempt(c, "resources.add", {"path": str(src), "wait": True})

    async def check(c: SkaldClient, data: Path, outcome: Any) -> None:
        listed = await c.call("search.glob", {"pattern": "**/*.md", "uri": "viking://resources/handbook"})
        if listed["count"] == 40:
            # the copy finished: a redelivered job (or the retry) indexes all of it, each page once
            r = await c.call("resources.add", {"path": str(src), "name": "handbook", "wait": True}, timeout_s=60)
            assert r["status"] == "done"
        else:
            r = await c.call("resources.add", {"path": str(src), "wait": True}, timeout_s=60)
            assert r["status"] == "done" and r["files"] == 40
        found = await c.call("search.find", {"query": "", "target_uri": "viking://resources/handbook", "level": 2,
                                             "limit": 500})
        uris = [h["uri"] for h in found["resources"]]
        assert len(uris) == len(set(uris)) == 40

    await crash_then_recover(nats_url, tmp_path, fault, before, crash, check)


@pytest.mark.parametrize("fault", ["index.change_noted", "tree.before_rename", "ingest.before_enqueue",
                                   "ingest.after_enqueue"])
async def test_readded_folder_killed_at_each_step(nats_url: str, tmp_path: Path, fault: str) -> None:
    """A folder added again after two of its files left the source and two came: the import removes
    the two from the tree, and a retry no longer sees them, so only the note the request left can
    take their rows out of the index. Before anybody adds it again, the index holds what the tree
    serves, each file once: the worker that takes over waits an hour for a note's age, so what
    finishes the import's note is the lease it held, lapsed a second after the kill."""
    src, folder = tmp_path / "manual", "viking://resources/manual"
    src.mkdir()
    for i in range(6):
        (src / f"a{i}.md").write_text(f"# Old page {i}\n\nOld manual page {i}.\n")

    async def before(c: SkaldClient) -> None:
        await c.call("resources.add", {"path": str(src), "wait": True})
        for i in (0, 1):
            (src / f"a{i}.md").unlink()
            (src / f"b{i}.md").write_text(f"# New page {i}\n\nNew manual page {i}.\n")

    async def crash(c: SkaldClient) -> Any:
        return await attempt(c, "resources.add", {"path": str(src), "wait": True})

    async def check(c: SkaldClient, data: Path, outcome: Any) -> None:
        served = set((await c.call("search.glob", {"pattern": "**/*.md", "uri": folder}))["matches"])
        assert await indexed(c, folder, served) == served
        await c.call("resources.add", {"path": str(src), "wait": True}, timeout_s=60)  # the client's retry
        want = {f"{folder}/{n}" for n in ("a2.md", "a3.md", "a4.md", "a5.md", "b0.md", "b1.md")}
        assert await indexed(c, folder, want) == want

    await crash_then_recover(nats_url, tmp_path, fault, before, crash, check, age_s="3600")


async def indexed(c: SkaldClient, under: str, want: set[str]) -> set[str]:
    """The file URIs the index holds under `under`, once they are `want` (or after 30 s, whatever
    they are then: the index catches up with a recovery in the background)."""
    got: set[str] = set()
    for _ in range(150):
        r = await c.call("search.find", {"query": "", "target_uri": under, "level": 2, "limit": 100})
        got = {h["uri"] for h in r["resources"]}
        if got == want:
            break
        await asyncio.sleep(0.2)
    return got


@pytest.mark.parametrize(("op", "fault"), [("fs.mv", "index.change_noted"), ("fs.mv", "ingest.before_enqueue"),
                                           ("fs.mv", "ingest.after_enqueue"), ("fs.rm", "ingest.before_enqueue")])
async def test_move_and_removal_killed_at_each_step(nats_url: str, tmp_path: Path, op: str, fault: str) -> None:
    """A retried move or removal whose tree change had happened answers NOT_FOUND, so only the note
    the request left can bring the index to the tree: no row of the source stays, the destination's
    are there once."""
    src, dst, other = ("viking://resources/notes/plan.md", "viking://resources/archive/plan.md",
                       "viking://resources/notes/keep.md")
    body = {"from_uri": src, "to_uri": dst} if op == "fs.mv" else {"uri": src}

    async def before(c: SkaldClient) -> None:
        await c.call("fs.write", {"uri": src, "content": "# Plan\n\nThe plan for the winter release.\n"})
        await c.call("fs.write", {"uri": other, "content": "# Keep\n\nA file nobody moves.\n"})

    async def crash(c: SkaldClient) -> Any:
        return await attempt(c, op, body)

    async def check(c: SkaldClient, data: Path, outcome: Any) -> None:
        moved = (await c.call("fs.stat", {"uri": "viking://resources/notes"}))["is_dir"] and not await exists(c, src)
        if not moved:  # killed before the tree changed: the request never happened, the retry makes it
            assert fault == "index.change_noted"
            assert await indexed(c, "viking://resources", {src, other}) == {src, other}
            await c.call(op, body)
        else:
            with pytest.raises(errors.NotFound):  # the retry cannot say more than the tree does
                await c.call(op, body)
        want = {other, dst} if op == "fs.mv" else {other}
        assert await indexed(c, "viking://resources", want) == want
        assert not [p for p in (data / "index-changes").glob("*") if p.is_file()]  # every move's note finished

    await crash_then_recover(nats_url, tmp_path, fault, before, crash, check)


async def exists(c: SkaldClient, uri: str) -> bool:
    try:
        await c.call("fs.stat", {"uri": uri})
    except errors.NotFound:
        return False
    return True


async def test_ledger_write_killed(nats_url: str, tmp_path: Path) -> None:
    body = {"query": "oolong tea", "mode": "context", "score_threshold": -1.0, "session_id": "L", "dedup_turns": 3}

    async def before(c: SkaldClient) -> None:
        await c.call("memories.write", {"category": "preferences", "content": "Prefers oolong tea."})
        await c.call("search.search", body)  # a first ledger on disk

    async def crash(c: SkaldClient) -> Any:
        await c.call("sessions.add_message", {"session_id": "L", "role": "user",
                                              "parts": [{"type": "text", "text": "next turn"}]})
        return await attempt(c, "search.search", {**body, "dedup_turns": 1})

    async def check(c: SkaldClient, data: Path, outcome: Any) -> None:
        ledger = data / "accounts/default/user/default/sessions/L/.recall_log.json"
        parsed = json.loads(ledger.read_text())  # never half-written
        assert all(isinstance(v["turn"], int) for v in parsed["records"].values())
        r = await c.call("search.search", {**body, "dedup_turns": 1})
        assert r["stats"]["dedup"]["status"] == "ok"

    await crash_then_recover(nats_url, tmp_path, "ledger.before_write", before, crash, check)


def test_crash_points_tried() -> None:
    """The figure for the compass: how many kill points this run exercised."""
    print(f"\ncrash points tried in this module: {len(TRIED)} ({len(set(TRIED))} distinct)")
