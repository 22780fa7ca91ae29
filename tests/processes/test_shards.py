"""A sharded index as separate processes: two retrievers, each holding one of two shards, and a
writer (indexer and assembler) on one NATS server.

Shown: rows split between the shards by their URI's first two segments; a search spanning both
gathers from both, and one inside a shard asks only it; read-your-writes holds on the shard that
never receives the write's sequence; with one shard's retriever SIGKILLed, a spanning search still
answers from the other and names the missing shard (find and context), while a search inside the
lost shard is UNAVAILABLE, never an empty answer; a new retriever for that shard rebuilds it from
its own subjects and the answers are whole again."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from skald.messages import errors
from skald.runtime.client.api import SkaldClient
from skald.store.index.shards import shard_of
from support import processes
from support.processes import direct_health, wait_ready, worker_ids
from support.stubs import ModelStub, chat

SHARDS = "2"


def projects() -> dict[int, list[str]]:
    """Project directories under viking://resources, two on each shard."""
    out: dict[int, list[str]] = {0: [], 1: []}
    for i in range(100):
        uri = f"viking://resources/proj{i}"
        k = shard_of("default", uri, 2)
        if len(out[k]) < 2:
            out[k].append(uri)
    return out


def uris(r: dict[str, Any]) -> set[str]:
    return {m["uri"] for kind in ("memories", "resources", "skills") for m in r[kind]}


async def shard_rows(c: SkaldClient, ids: dict[str, Any]) -> dict[int, int]:
    out = {}
    for wid in ids:
        h = (await direct_health(c, wid))["actors"]["retriever"]
        out[h["shard"]] = h["index"]["rows"]
    return out


def planner() -> ModelStub:
    """A model that plans a list search's queries (the retrievers' only use of it here)."""
    plan = {"reasoning": "the birds", "queries": [{"query": "osprey nests", "context_type": "resource", "priority": 1},
                                                  {"query": "where ospreys nest", "priority": 2}]}
    return ModelStub(lambda p, b: (200, chat(json.dumps(plan)), 0))


def plans_asked(stub: ModelStub) -> int:
    return sum("plan retrieval" in b["messages"][0]["content"] for _, b in stub.calls)


async def test_two_shards_as_processes(nats_url: str, tmp_path: Path) -> None:
    prefix = "shards"
    data = tmp_path / "data"
    common = {"embedder": "hash", "index_shards": SHARDS}
    stub = planner()
    model = {"llm_base_url": stub.url, "llm_model": "stub"}
    r0 = processes.worker(nats_url, data, prefix, "retriever", index_shard="0", **common, **model)
    r1 = processes.worker(nats_url, data, prefix, "retriever", index_shard="1", **common, **model)
    writer = processes.worker(nats_url, data, prefix, "indexer,assembler", **common)
    everything: list[subprocess.Popen[str]] = [r0, r1, writer]
    try:
        for p in everything:
            wait_ready(p, 60)
        by_shard = projects()
        async with await SkaldClient.connect(nats_url, prefix=prefix) as c:
            for dirs in by_shard.values():
                for d in dirs:
                    await c.call("fs.write", {"uri": f"{d}/osprey.md", "content":
                                              f"# Osprey {d}\n\nThe osprey nests near {d.rsplit('/', 1)[-1]}.\n"})
            ids = await worker_ids(c, "retriever", 2)
            rows = await shard_rows(c, ids)
            assert set(rows) == {0, 1} and rows[0] > 0 and rows[1] > 0  # each holds its own share

            # A scope spanning both shards gathers from both; the client sent its last write's
            # sequence, which one of the two shards never receives: it must still answer.
            every = [f"{d}/osprey.md" for dirs in by_shard.values() for d in dirs]
            r = await c.call("search.find", {"query": "osprey nests", "target_uri": "viking://resources",
                                             "limit": 10, "include_provenance": True})
            assert set(every) <= uris(r)
            assert "missing_shards" not in r and r["provenance"]["shards"] == 2
            r = await c.call("search.search", {"query": "osprey nests", "target_uri": "viking://resources",
                                               "limit": 10})  # list mode: each shard descends its own rows
            assert set(every) <= uris(r) and "missing_shards" not in r
            # With a session, the spanning list search is planned once (one model call, not one a
            # shard) and every shard searches that plan's queries, each embedded once.
            session = data / "accounts/default/user/default/sessions/s1"
            session.mkdir(parents=True)
            (session / "messages.jsonl").write_text(json.dumps({"id": "m0", "role": "user", "parts": [
                {"type": "text", "text": "we are counting ospreys this spring"}]}) + "\n")
            r = await c.call("search.search", {"query": "what about their nests?", "session_id": "s1",
                                               "target_uri": "viking://resources", "limit": 10})
            assert plans_asked(stub) == 1 and r["query_plan"]["status"] == "planned"
            assert len(r["query_plan"]["queries"]) == 3 and set(every) <= uris(r)

            # Inside one shard: that shard alone answers (the other holds none of its rows).
            d0, d1 = by_shard[0][0], by_shard[1][0]
            r = await c.call("search.find", {"query": "osprey", "target_uri": d1})
            assert f"{d1}/osprey.md" in uris(r) and all(u.startswith(f"{d1}/") for u in uris(r))

            # Read-your-writes: a new file on shard 0 is found at once, and shard 1, which never
            # receives that sequence, answers a search in its own scope without waiting it out.
            await c.call("fs.write", {"uri": f"{d0}/heron.md", "content": "# Heron\n\nThe grey heron waits.\n"})
            r = await c.call("search.find", {"query": "grey heron", "target_uri": d0})
            assert f"{d0}/heron.md" in uris(r)
            r = await c.call("search.find", {"query": "osprey", "target_uri": d1}, timeout_s=5.0)
            assert f"{d1}/osprey.md" in uris(r)
            ab = await c.call("fs.abstract", {"uri": f"{d1}/osprey.md"})  # read on its own shard
            assert ab["content"]

            # Shard 1's only retriever dies: what spans it says so; what lies inside it is UNAVAILABLE.
            r1.kill()
            r1.wait()
            await asyncio.sleep(0.3)
            r = await c.call("search.find", {"query": "osprey nests", "target_uri": "viking://resources",
                                             "limit": 10})
            assert [m["shard"] for m in r["missing_shards"]] == [1]
            assert r["missing_shards"][0]["code"] == "UNAVAILABLE"
            got = uris(r)
            assert {f"{d}/osprey.md" for d in by_shard[0]} <= got
            assert not any(u.startswith(tuple(by_shard[1])) for u in got)
            with pytest.raises(errors.Unavailable):  # the client asks again until its deadline
                await c.call("search.find", {"query": "osprey", "target_uri": d1}, timeout_s=2.0)
            r = await c.call("search.find", {"query": "osprey", "target_uri": d0})
            assert "missing_shards" not in r and f"{d0}/osprey.md" in uris(r)
            block = await c.call("search.search", {"query": "osprey nests", "mode": "context",
                                                   "score_threshold": -1.0})
            assert "shard:1" in block["stats"]["retrieval_errors"]

            # A new retriever for shard 1 (its predecessor left no snapshot) rebuilds the shard from
            # the stream's shard-1 subjects alone and the spanning search is whole again.
            r1 = processes.worker(nats_url, data, prefix, "retriever", index_shard="1", **common)
            everything.append(r1)
            wait_ready(r1, 60)
            ids = await worker_ids(c, "retriever", 2)
            # Ready is not caught up: the rebuild follows the stream after the ready line (on a
            # loaded machine it was still at 0 rows when first asked).
            for _ in range(150):
                if (await shard_rows(c, ids))[1] == rows[1]:
                    break
                await asyncio.sleep(0.2)
            assert (await shard_rows(c, ids))[1] == rows[1]  # every row of its shard, none of the other's
            r = await c.call("search.find", {"query": "osprey nests", "target_uri": "viking://resources",
                                             "limit": 10})
            assert set(every) <= uris(r) and "missing_shards" not in r
    finally:
        processes.reap(everything)
        stub.close()
