"""A real multi-process deployment: three retrievers, two session workers, two archive workers,
one assembler and one indexer, each its own process on one NATS server. Under a steady mixed
load, one worker of each kind is SIGKILLed (the assembler is restarted, being the only one).

Shown: no acknowledged write is lost; every request is answered, or times out and then succeeds
on retry; every Phase 2 is finished by a surviving archive worker; the retriever replicas
converge to the same index (same content hash)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from pathlib import Path
from typing import Any

from skald.messages import errors
from skald.runtime.client.api import SkaldClient
from support import processes
from support.processes import converged_replicas, reap, wait_ready

KINDS = {"retriever": 3, "session": 2, "archive": 2, "assembler": 1, "indexer": 1}
RETRYABLE = (errors.DeadlineExceeded, errors.Unavailable, errors.Internal)


def start(url: str, data: Path, prefix: str, actor: str) -> subprocess.Popen[str]:
    return processes.worker(url, data, prefix, actor, lease_ttl_s="1", work_ack_wait_s="2")


class Load:
    def __init__(self, c: SkaldClient) -> None:
        self.c = c
        self.retried = 0
        self.answered = 0
        self.memories: dict[str, str] = {}
        self.messages: dict[str, list[str]] = {f"s{i}": [] for i in range(4)}
        self.commits = 0

    async def call(self, op: str, body: dict[str, Any]) -> Any:
        """Answered, or timed out / unavailable and then retried until it succeeds."""
        for attempt in range(60):
            try:
                r = await self.c.call(op, body, timeout_s=2.0)
                self.answered += 1
                return r
            except RETRYABLE:
                self.retried += 1
                await asyncio.sleep(min(1.0, 0.1 * (attempt + 1)))
        raise AssertionError(f"{op} never succeeded")

    async def run(self, seconds: float, rng: random.Random) -> None:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            n += 1
            roll = rng.random()
            if roll < 0.6:
                await self.call("search.find", {"query": f"note {rng.randint(0, 50)}"})
            elif roll < 0.75:
                await self.call("search.search", {"query": f"note {rng.randint(0, 50)}", "mode": "context",
                                                  "score_threshold": -1.0})
            elif roll < 0.9:
                sid = rng.choice(sorted(self.messages))
                mid = f"m{n:06d}"
                await self.call("sessions.add_message", {"session_id": sid, "role": "user", "id": mid,
                                                         "parts": [{"type": "text", "text": f"message {n}"}]})
                self.messages[sid].append(mid)
                if len(self.messages[sid]) % 5 == 0:
                    await self.call("sessions.commit", {"session_id": sid, "keep_recent_count": 1})
                    self.commits += 1
            else:
                name = f"n{n:06d}.md"
                r = await self.call("memories.write", {"category": "entities", "content": f"Entity note {n}.",
                                                       "name": name})
                self.memories[r["root_uri"]] = f"Entity note {n}."


async def test_killing_one_worker_of_each_kind_under_load(nats_url: str, tmp_path: Path) -> None:
    prefix = "scaleout"
    data = tmp_path / "data"
    procs: dict[str, list[subprocess.Popen[str]]] = {k: [] for k in KINDS}
    everything: list[subprocess.Popen[str]] = []
    try:
        for kind, n in KINDS.items():
            for _ in range(n):
                p = start(nats_url, data, prefix, kind)
                procs[kind].append(p)
                everything.append(p)
        for p in everything:
            wait_ready(p, 60)
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            load = Load(c)
            for i in range(30):
                await load.call("memories.write", {"category": "entities", "content": f"Seed note {i}.",
                                                   "name": f"seed{i}.md"})
            rng = random.Random(11)
            task = asyncio.create_task(load.run(14.0, rng))
            await asyncio.sleep(3.0)
            for kind in ("retriever", "session", "archive", "assembler"):
                victim = procs[kind][0]
                victim.kill()
                victim.wait()
                await asyncio.sleep(1.0)
            replacement = start(nats_url, data, prefix, "assembler")  # the only one: bring it back
            everything.append(replacement)
            await asyncio.to_thread(wait_ready, replacement, 60)
            await task
            assert load.answered > 100 and load.commits >= 2
            # no acknowledged write lost
            for uri, content in load.memories.items():
                assert (await load.call("fs.read", {"uri": uri}))["content"] == content
            for sid, ids in load.messages.items():
                if not ids:
                    continue
                archives = (await load.call("sessions.archives", {"session_id": sid}))["archives"]
                archived = sum(a["message_count"] for a in archives)
                ctx = await load.call("sessions.context", {"session_id": sid})
                live = [m["id"] for m in ctx["messages"]]
                assert set(ids[-1:]) <= set(live)
                assert archived + len([m for m in live if m in ids]) >= len(ids)
                # every Phase 2 finished by a survivor
                for _ in range(100):
                    archives = (await load.call("sessions.archives", {"session_id": sid}))["archives"]
                    if all(a["state"] == "completed" for a in archives):
                        break
                    await asyncio.sleep(0.3)
                assert all(a["state"] == "completed" for a in archives), archives
            # the surviving replicas converge on one index
            hashes = await converged_replicas(c, 2)
            assert len({h["content_hash"] for h in hashes.values()}) == 1
            found = await load.call("search.find", {"query": "", "target_uri": "viking://user/default/memories/"
                                                    "entities", "level": 2, "limit": 5000})
            assert {h["uri"] for h in found["memories"]} >= set(load.memories)
            print(f"\nanswered {load.answered}, retried {load.retried}, commits {load.commits}, "
                  f"memories {len(load.memories)}")
    finally:
        reap(everything)
