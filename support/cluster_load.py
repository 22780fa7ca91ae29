"""A mixed load for clusters under failure (add_message with caller and server ids, fs.write, find,
commit; every request retried with its ids until acknowledged), and the check that every
acknowledged message and write is there exactly once afterwards, read from a data directory or
from any other tree."""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from skald.messages import errors
from skald.runtime.client.api import SkaldClient
from skald.store.treeport import Tree
from support.processes import journal_counts

SESSIONS = "accounts/default/user/default/sessions"


class Load:
    """A mixed load; each request is retried (same ids, same idempotency key) until acknowledged."""

    def __init__(self, c: SkaldClient) -> None:
        self.c = c
        self.answered = self.retried = self.internal = 0
        self.outage_s = 0.0  # the longest time one request needed to be acknowledged
        self.caller_ids: dict[str, list[str]] = {"c0": [], "c1": []}
        self.server_texts: dict[str, list[str]] = {"v0": [], "v1": []}
        self.files: dict[str, str] = {}
        self.commits = 0

    async def call(self, op: str, body: dict[str, Any]) -> Any:
        t0 = time.monotonic()
        for _ in range(200):
            try:
                r = await self.c.call(op, body, timeout_s=3.0)
            except errors.Internal:
                self.internal += 1
            except (errors.Unavailable, errors.DeadlineExceeded):
                self.retried += 1
            else:
                self.answered += 1
                self.outage_s = max(self.outage_s, time.monotonic() - t0)
                return r
            await asyncio.sleep(0.2)
        raise AssertionError(f"{op} never acknowledged")

    async def run(self, stop: asyncio.Event, rng: random.Random) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            roll = rng.random()
            if roll < 0.3:
                sid = rng.choice(sorted(self.caller_ids))
                await self.call("sessions.add_message", {"session_id": sid, "role": "user", "id": f"m{n:05d}",
                                                         "parts": [{"type": "text", "text": f"caller {n}"}]})
                self.caller_ids[sid].append(f"m{n:05d}")
            elif roll < 0.55:
                sid = rng.choice(sorted(self.server_texts))
                await self.call("sessions.add_message", {"session_id": sid, "role": "user", "request_id": f"r{n}",
                                                         "parts": [{"type": "text", "text": f"server {n}"}]})
                self.server_texts[sid].append(f"server {n}")
            elif roll < 0.7:
                uri = f"viking://resources/cl/f{n % 12}.md"
                await self.call("fs.write", {"uri": uri, "content": f"# Doc\n\nrevision {n}\n", "mode": "replace"})
                self.files[uri] = f"# Doc\n\nrevision {n}\n"
            elif roll < 0.95:
                await self.call("search.find", {"query": f"revision {rng.randint(0, n)}"})
            else:
                used = {**self.caller_ids, **self.server_texts}
                sid = rng.choice(sorted(k for k, v in used.items() if v))
                await self.call("sessions.commit", {"session_id": sid, "keep_recent_count": 2})
                self.commits += 1


def where_each(msgs: list[dict[str, Any]]) -> str:
    """Which part of the session (an archive or live) holds how many messages: where a loss sits."""
    counts: dict[str, int] = {}
    for m in msgs:
        counts[m["_where"]] = counts.get(m["_where"], 0) + 1
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


async def current(js: Any, name: str, timeout_s: float = 30.0) -> None:
    """Until every replica of the stream is current again (a restarted node caught up)."""
    for _ in range(int(timeout_s / 0.25)):
        try:
            info = await js.stream_info(name)
            reps = info.cluster.replicas or []
            if info.cluster.leader and len(reps) == 2 and all(r.current for r in reps):
                return
        except Exception:  # noqa: BLE001 - electing
            pass
        await asyncio.sleep(0.25)
    raise AssertionError(f"{name} replicas never caught up")


def stored_messages(tree: Tree, sid: str) -> list[dict[str, Any]]:
    """Every message of a session as the tree holds it: the archives, then root (each with
    `_where`). Root is read from its file, not from `sessions.context`, whose messages also carry
    the raw of archives still pending Phase 2 (they would count twice)."""
    out: list[dict[str, Any]] = []
    sdir = f"{SESSIONS}/{sid}"
    try:
        archives = sorted(e.name for e in tree.list(f"{sdir}/history") if e.name.startswith("archive_"))
    except FileNotFoundError:
        archives = []
    keys = [*((a, f"{sdir}/history/{a}/messages.jsonl") for a in archives), ("live", f"{sdir}/messages.jsonl")]
    for where, key in keys:
        try:
            text = tree.read(key).decode()
        except FileNotFoundError:
            continue
        out += [{**m, "_where": where} for x in text.splitlines()
                if x.strip() and (m := json.loads(x)).get("message_kind") != "checkpoint"]
    return out


async def every_ack_kept_once(load: Load, c: SkaldClient, tree: Tree, prefix: str) -> None:
    """After the load and a restart of the session owners: every acknowledged message stored
    exactly once (caller ids and server ids), the counters agree, every acknowledged write reads
    back, and the journal carries each stored message once."""
    assert load.internal == 0
    assert load.answered > 100 and load.commits >= 1, (load.answered, load.commits)
    every_id: set[tuple[str, str]] = set()
    for sid in [*load.caller_ids, *load.server_texts]:
        await load.call("sessions.context", {"session_id": sid})  # loaded (and repaired) by its owner
        msgs = await asyncio.to_thread(stored_messages, tree, sid)
        ids = [m["id"] for m in msgs]
        twice = {i for i in ids if ids.count(i) > 1}
        where = [(m["id"], m["_where"], m["created_at"]) for m in msgs if m["id"] in twice]
        assert not twice, f"{sid}: stored twice: {where}"
        info = await load.call("sessions.get", {"session_id": sid})
        assert info["total_message_count"] == len(ids), (sid, info, len(ids))
        if sid in load.caller_ids:
            acked, held = set(load.caller_ids[sid]), set(ids)
            assert held == acked, (f"{sid}: acknowledged, not stored {sorted(acked - held)}; stored, never "
                                   f"acknowledged {sorted(held - acked)}; {where_each(msgs)}")
        else:
            texts = [m["parts"][0]["text"] for m in msgs]
            acked, held = set(load.server_texts[sid]), set(texts)
            assert sorted(texts) == sorted(load.server_texts[sid]), (
                f"{sid}: acknowledged, not stored {sorted(acked - held)}; stored, never acknowledged "
                f"{sorted(held - acked)}")
        every_id |= {(sid, i) for i in ids}
    for uri, content in load.files.items():
        assert (await load.call("fs.read", {"uri": uri}))["content"] == content
    # the journal has each stored message exactly once (recovered ones included)
    counts: dict[tuple[str, str], int] = {}
    for _ in range(60):
        counts = await journal_counts(c.nc, prefix)
        if all(counts.get(k) for k in every_id):
            break
        await asyncio.sleep(0.25)
    assert {k: counts.get(k) for k in every_id} == dict.fromkeys(every_id, 1)


