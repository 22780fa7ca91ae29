"""Crash campaign: SIGKILL real worker processes at random points across add_message, commit
Phase 1, Phase 2, memory merge, ingest (a folder imported and added again among them), fs writes
and moves (fault points armed to fire at their k-th hit, or a kill at a random moment), with a
model server that answers (Phase 2 with memories, one keyed memory rewritten on every run so
merges happen). Every trial runs the same small workload on one deployment (a new session, a file
write, a move, a resource add, a memory, then a removal or, every other trial, a folder imported
twice) against a worker armed for one point; the trial ends when the worker dies (or is killed).
Then a healthy worker settles everything and the campaign counts, from the disk and the API:

- acknowledged: operations whose reply came back ok;
- lost: an acknowledged message in neither the live log nor a completed archive, an acknowledged
  write, resource or memory that does not read back as acknowledged;
- duplicated: a message stored twice, a message in the journal other than exactly once, the keyed
  memory as more than one file;
- stuck: an archive neither completed nor failed, or work still queued, a minute after the end;
- stale rows: index rows of resources the tree no longer holds (a file moved or removed);
- unindexed: files the workload wrote or moved that the tree holds and the index has no row of.

Shared by `bench/crash_campaign.py` (200 trials and more, from the command line) and
`tests/processes/test_crash_campaign.py` (40 trials in CI on each store).
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skald.messages import errors
from skald.runtime.bus.jetstream_tree import JetStreamTree
from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient
from skald.store.local_tree import LocalTree
from skald.store.treeport import Tree
from support import processes
from support.processes import journal_counts, reap, unless_dead, wait_ready
from support.stubs import ModelStub, chat

# Where a worker can die, by area: (fault point, the highest hit it is armed for). "moment" is a
# kill at a random time into the workload, wherever the worker happens to be.
AREAS: dict[str, list[tuple[str, int]]] = {
    "add_message": [("session.after_append", 4)],
    "commit phase 1": [("commit.after_archive", 1), ("commit.after_enqueue", 1), ("commit.before_root", 1),
                       ("commit.after_root", 1)],
    "phase 2": [("archive.after_journal", 1), ("archive.after_overview", 1), ("archive.after_memories", 1),
                ("archive.after_attempt", 1)],
    "memory merge": [("archive.after_history", 1)],
    "ingest": [("ingest.before_enqueue", 2), ("ingest.after_enqueue", 2), ("ingest.before_publish", 2),
               ("ingest.after_publish", 2), ("ingest.after_done", 2)],
    "fs writes": [("tree.before_rename", 4), ("ledger.before_write", 2)],
    "moves": [("index.change_noted", 3)],  # fs.mv, then fs.rm or the two imports, note first
    "moment": [("", 0)],
}
ACTORS = "session,archive,indexer,retriever"
KEYED = "viking://~/memories/preferences/morning-drink.md"


@dataclass
class Tally:
    trials: int = 0
    by_area: collections.Counter[str] = field(default_factory=collections.Counter)
    acked: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # index rows of files the tree no longer holds
    unindexed: list[str] = field(default_factory=list)  # written or moved files the index has no row of
    messages: dict[str, list[str]] = field(default_factory=dict)  # session -> acknowledged ids
    files: dict[str, str] = field(default_factory=dict)  # uri -> acknowledged content
    memories: list[str] = field(default_factory=list)  # acknowledged memory uris
    moving: dict[str, str] = field(default_factory=dict)  # a move not acknowledged: from -> to
    removing: set[str] = field(default_factory=set)  # a removal not acknowledged

    def line(self) -> str:
        return (f"trials {self.trials}, acknowledged operations {self.acked}, lost {len(self.lost)}, "
                f"duplicated {len(self.duplicated)}, stuck {len(self.stuck)}, stale rows {len(self.stale)}, "
                f"unindexed {len(self.unindexed)}")


def model() -> ModelStub:
    """Answers Phase 2 with a working memory, the checkpoint summaries asked for and two memories,
    one of them keyed (rewritten every run: a merge with a version kept); anything else briefly."""
    runs = {"n": 0}

    def respond(path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
        msgs = body.get("messages") or []
        if len(msgs) < 2 or "working memory" not in str(msgs[0].get("content", "")):
            return 200, chat("A short summary."), 0
        runs["n"] += 1
        prompt = str(msgs[1].get("content", ""))
        n = prompt.count('<checkpoint_source index="')
        return 200, chat(json.dumps({
            "overview": f"# Working memory\n\nRun {runs['n']}: the user talks about drinks.",
            "checkpoint_summaries": [f"summary {i}" for i in range(n)],
            "memories": [{"category": "events", "content": f"# Event\n\nRun {runs['n']} happened."},
                         {"category": "preferences", "key": "morning drink",
                          "content": f"Drinks number {runs['n']} in the morning."}]})), 0

    return ModelStub(respond)


async def once(c: SkaldClient, p: subprocess.Popen[str], op: str, body: dict[str, Any]) -> Any:
    """One attempt; None when the worker `p` died under it (applied or not, the caller cannot know)."""
    try:
        return await unless_dead(p, c.call(op, body, timeout_s=2.0))
    except (errors.DeadlineExceeded, errors.Unavailable, errors.Internal):
        return None


def folder(src: Path, i: int) -> tuple[Path, Path]:
    """A folder to import, and the file that leaves it before it is added again (one comes too)."""
    src.mkdir(parents=True)
    for name in ("a", "b", "c"):
        (src / f"{name}.md").write_text(f"# {name.upper()} {i}\n\nfolder page {name} of trial {i}\n")
    return src / "a.md", src / "d.md"


async def workload(c: SkaldClient, p: subprocess.Popen[str], t: Tally, i: int, sources: Path) -> None:
    sid = f"s{i:03d}"
    t.messages[sid] = []
    steps: list[tuple[str, dict[str, Any]]] = []
    for j, role in enumerate(("user", "assistant", "user", "assistant")):
        steps.append(("sessions.add_message", {"session_id": sid, "role": role, "id": f"{sid}-m{j}",
                                               "parts": [{"type": "text", "text": f"{role} line {j} of {sid}"}]}))
    steps += [("sessions.commit", {"session_id": sid}),
              ("fs.write", {"uri": f"viking://resources/w/{sid}.md", "content": f"# W {sid}\n\nwritten {i}\n"}),
              ("fs.mv", {"from_uri": f"viking://resources/w/{sid}.md", "to_uri": f"viking://resources/m/{sid}.md"}),
              ("resources.add", {"content": f"# R {sid}\n\nadded {i}\n", "name": f"{sid}.md",
                                 "target_uri": "viking://resources/r"}),
              ("memories.write", {"category": "entities", "content": f"Entity {sid} is number {i}."})]
    imported: dict[str, Any] = {"path": str(sources / sid), "target_uri": "viking://resources/f", "wait": False}
    if i % 2:
        steps.append(("fs.rm", {"uri": f"viking://resources/m/{sid}.md"}))
    else:  # a folder imported, then added again once a file left it and one came (every other trial: CI's time)
        leaves, comes = await asyncio.to_thread(folder, sources / sid, i)
        steps += [("resources.add", imported), ("resources.add", imported)]
    imports = 0
    for op, body in steps:
        if body is imported:
            imports += 1
            if imports == 2:
                await asyncio.to_thread(leaves.unlink)
                await asyncio.to_thread(comes.write_text, f"# D {i}\n\nfolder page d of trial {i}\n")
        if op == "fs.mv":
            t.moving[body["from_uri"]] = body["to_uri"]
        elif op == "fs.rm":
            t.removing.add(body["uri"])
        r = await once(c, p, op, body)
        if r is None:
            return
        t.acked += 1
        if op == "fs.mv":
            del t.moving[body["from_uri"]]
            if body["from_uri"] in t.files:
                t.files[body["to_uri"]] = t.files.pop(body["from_uri"])
        elif op == "fs.rm":
            t.removing.discard(body["uri"])
            t.files.pop(body["uri"], None)
        if op == "sessions.add_message":
            t.messages[sid].append(body["id"])
        elif op == "fs.write":
            t.files[body["uri"]] = body["content"]
        elif op == "resources.add" and "content" in body:
            t.files[r["root_uri"]] = body["content"]
        elif op == "memories.write":
            t.memories.append(r["root_uri"])


async def queued_subjects(js: Any, prefix: str) -> list[str]:
    """What the work stream still holds, by subject and delivery count."""
    name = stream_name(prefix, "work")
    info = await js.stream_info(name)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            msg = await js.get_msg(name, seq)
        except Exception:  # noqa: BLE001 - acknowledged meanwhile
            continue
        out.append(f"{msg.subject} (seq {seq}, {len(msg.data or b'')} bytes)")
    return out


async def settle(c: SkaldClient, prefix: str, t: Tally, timeout_s: float = 60.0) -> dict[str, list[dict]]:
    """Every session's archives once none is pending and the work queue is empty (or the timeout:
    what is still pending then is stuck)."""
    end = time.monotonic() + timeout_s
    archives: dict[str, list[dict]] = {}
    js = c.nc.jetstream(timeout=5.0)
    while True:
        for sid in t.messages:
            try:
                archives[sid] = (await c.call("sessions.archives", {"session_id": sid}, timeout_s=5.0))["archives"]
            except errors.NotFound:
                archives[sid] = []
        pending = [f"{sid}/{a['archive_id']} {a['state']}" for sid, arcs in archives.items() for a in arcs
                   if a["state"] not in ("completed", "failed")]
        queued = (await js.stream_info(stream_name(prefix, "work"))).state.messages
        if not pending and not queued:
            return archives
        if time.monotonic() > end:
            t.stuck += pending + [f"still queued: {s}" for s in await queued_subjects(js, prefix)]
            return archives
        await asyncio.sleep(0.25)


async def _read(c: SkaldClient, uri: str) -> str | None:
    try:
        return str((await c.call("fs.read", {"uri": uri}, timeout_s=10.0))["content"])
    except errors.NotFound:
        return None


async def index_gaps(c: SkaldClient, timeout_s: float = 30.0) -> tuple[list[str], list[str]]:
    """(stale, unindexed): rows the index holds for resources the tree does not (a move, removal or
    folder import whose index job a killed worker never queued), and files the workload wrote,
    moved or imported (under `w/`, `m/` and `f/`) that the tree holds with no row (a write or
    import whose job was never queued), until
    an indexer finishes the notes those left: none once settled, or what is still there after
    `timeout_s`."""
    end = time.monotonic() + timeout_s
    while True:
        found = await c.call("search.find", {"query": "", "target_uri": "viking://resources", "level": 2,
                                             "limit": 10_000}, timeout_s=10.0)
        files = await c.call("search.glob", {"pattern": "**", "uri": "viking://resources", "node_limit": 100_000},
                             timeout_s=10.0)
        # Listings cut short would count rows of files left out as stale (the glob's default
        # stops at 256 entries: 40 trials passed it once each trial also imported a folder).
        assert not files["truncated"] and len(found["resources"]) < 10_000, "the campaign outgrew its listings"
        held = set(files["matches"])
        rows = {h["uri"].split("#")[0] for h in found["resources"]}
        stale = sorted(rows - held)
        written = {u for u in held if u.endswith(".md") and (u.rsplit("/", 2)[-2] in ("w", "m")
                                                              or u.startswith("viking://resources/f/"))}
        unindexed = sorted(written - rows)
        if (not stale and not unindexed) or time.monotonic() > end:
            return stale, unindexed
        await asyncio.sleep(0.5)


def _text(tree: Tree, key: str) -> str:
    try:
        return tree.read(key).decode()
    except FileNotFoundError:
        return ""


async def check(c: SkaldClient, tree: Tree, prefix: str, t: Tally) -> None:
    """What the tree holds (the data directory's, or JetStream's) against what was acknowledged."""
    archives = await settle(c, prefix, t)
    stored: dict[str, list[str]] = {}
    sdirs = "accounts/default/user/default/sessions"
    for sid, ids in t.messages.items():
        if tree.stat(f"{sdirs}/{sid}") is None:
            t.lost += [f"{sid}/{m}" for m in ids]
            continue
        try:
            await c.call("sessions.context", {"session_id": sid}, timeout_s=10.0)  # loaded, repaired by its owner
        except errors.NotFound:
            files = [e.name for e in tree.list(f"{sdirs}/{sid}")]
            t.lost += [f"{sid}/{m} (session unreadable: {files})" for m in ids]
            if not ids:
                print(f"  note: {sid} unreadable with nothing acknowledged: {files}")
            continue
        got: list[str] = []
        for a in archives.get(sid, []):
            if a["state"] == "completed":
                lines = _text(tree, f"{sdirs}/{sid}/history/{a['archive_id']}/messages.jsonl").splitlines()
                got += [json.loads(x)["id"] for x in lines if x.strip()]
        got += [m["id"] for x in _text(tree, f"{sdirs}/{sid}/messages.jsonl").splitlines()
                if x.strip() and (m := json.loads(x)).get("message_kind") != "checkpoint"]
        # a failed archive's raw stays live until a later archive covers it: count each id once
        # per place it is stored, and a stored id in two places is a duplicate
        t.duplicated += [f"{sid}/{m} stored {got.count(m)} times" for m in set(got) if got.count(m) > 1]
        failed = {a["archive_id"] for a in archives.get(sid, []) if a["state"] == "failed"}
        for a in failed:
            lines = _text(tree, f"{sdirs}/{sid}/history/{a}/messages.jsonl").splitlines()
            got += [json.loads(x)["id"] for x in lines if x.strip() and json.loads(x)["id"] not in got]
        t.lost += [f"{sid}/{m}" for m in ids if m not in got]
        stored[sid] = sorted(set(got))
    counts: dict[tuple[str, str], int] = {}
    for _ in range(40):
        counts = await journal_counts(c.nc, prefix)
        if all(counts.get((sid, m)) for sid, ms in stored.items() for m in ms):
            break
        await asyncio.sleep(0.25)
    t.duplicated += [f"{sid}/{m} in the journal {counts.get((sid, m), 0)} times"
                     for sid, ms in stored.items() for m in ms if counts.get((sid, m)) != 1]
    for uri, content in t.files.items():
        got_text = await _read(c, uri)
        if got_text is None and uri in t.moving:  # a move not acknowledged: here or there
            got_text = await _read(c, t.moving[uri])
        if got_text is None and uri in t.removing:  # a removal not acknowledged: there or gone
            continue
        if got_text != content:
            t.lost.append(f"{uri}: {got_text!r}")
    stale, unindexed = await index_gaps(c)
    t.stale += stale
    t.unindexed += unindexed
    for uri in t.memories:
        try:
            await c.call("fs.read", {"uri": uri}, timeout_s=10.0)
        except errors.NotFound:
            t.lost.append(uri)
    prefs = "accounts/default/user/default/memories/preferences"
    keyed = [e.name for e in tree.list(prefs) if e.name.startswith("morning-drink")] \
        if tree.stat(prefs) is not None else []
    if len(keyed) > 1:
        t.duplicated.append(f"the keyed memory as {keyed}")


async def campaign(nats_url: str, data: Path, trials: int, seed: int, prefix: str = "camp",
                   verbose: bool = True, store: str = "local") -> Tally:
    """`trials` SIGKILLed workers, one after another, then a healthy one and the check. With
    `store="jetstream"` the tree is the bus's and every worker starts on an empty data directory of
    its own: each crash also loses the disk."""
    rng = random.Random(seed)
    t = Tally()
    stub = model()
    procs: list[subprocess.Popen[str]] = []
    settings = {"lease_ttl_s": "1", "work_ack_wait_s": "1", "llm_base_url": stub.url, "snapshot_interval_s": "30",
                "store": store, "change_recovery_age_s": "0"}  # one worker at a time: a note is a dead request's

    def disk(i: int | str) -> Path:
        return data if store == "local" else data / f"worker-{i}"
    try:
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            for i in range(trials):
                area = rng.choice(sorted(AREAS))
                point, most = rng.choice(AREAS[area])
                fault = f"{point}@{rng.randint(1, most)}" if point else ""
                p = processes.worker(nats_url, disk(i), prefix, ACTORS, fault=fault, **settings)
                procs.append(p)
                await asyncio.to_thread(wait_ready, p, 60)
                work = asyncio.create_task(workload(c, p, t, i, data.parent / f"{prefix}-sources"))
                if not point:
                    await asyncio.sleep(rng.uniform(0.0, 0.4))
                    p.kill()
                await work
                await asyncio.sleep(0.2)  # a Phase 2 or ingest point fires after the replies
                if p.poll() is None:
                    p.kill()  # the armed point was not reached: killed anyway, between requests
                await asyncio.to_thread(p.wait)
                t.trials += 1
                t.by_area[area] += 1
                if verbose and (i + 1) % 25 == 0:
                    print(f"  {i + 1} trials, {t.acked} acknowledged", flush=True)
            log = (data.parent / f"{prefix}-healthy.log").open("w")
            healthy = processes.worker(nats_url, disk("healthy"), prefix, ACTORS, stderr=log, **settings)
            procs.append(healthy)
            await asyncio.to_thread(wait_ready, healthy, 60)
            tree: Tree = LocalTree(data) if store == "local" else \
                await asyncio.to_thread(JetStreamTree, [nats_url], f"{prefix}_tree")
            try:
                await check(c, tree, prefix, t)
            finally:
                if isinstance(tree, JetStreamTree):
                    await asyncio.to_thread(tree.close)
    finally:
        reap(procs)
        stub.close()
    return t
