"""search(mode="context") latency with 10, 100 and 1,000 candidates at 100k indexed nodes.

    .venv/bin/python bench/context.py [--size 100000] [--queries 200]

The corpus is bench/find.py's clustered topic tree (hashed embedder, bulk-indexed through the
real pipeline) plus 300 event memories, so the default tiers read real files (events serve
their `# Summary` overview and may deepen). No LLM: no expansion, no rewrite. Per request it
prints the end-to-end time over NATS (client -> retriever relay -> assembler -> retriever
candidates -> reads -> render) and Skald's own assembly time from `stats.telemetry.own_ms`
(the whole pipeline minus query embedding). The baseline in the same run is `search.find`
with the same limit over the same bus: what a client pays for a ranked list without assembly.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import local  # noqa: E402
from bench.find import WORDS, load, pct, row  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402

# Stages of `stats.telemetry`: the index searches and shaping (the retriever), then turn
# grouping, body reads and tier filling with rendering (the assembler).
STAGES = ("search_ms", "shape_ms", "group_ms", "read_ms", "fill_ms")


async def events(client: SkaldClient, n: int, rng: random.Random) -> None:
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(12))
        body = (f"# Summary\nIncident {i}: {words}.\n\n# Details\n"
                + " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 400))) + ".\n")
        await client.call("memories.write", {"category": "events", "content": body})


async def measure(client: SkaldClient, limit: int, queries: list[str]) -> None:
    body = {"mode": "context", "limit": limit, "score_threshold": -1.0, "max_tokens": 1600, "telemetry": True}
    for q in queries[:10]:
        await client.call("search.search", {**body, "query": q}, timeout_s=60)
    e2e, own, find, got = [], [], [], []
    stages: dict[str, list[float]] = {}
    for q in queries:
        t = time.perf_counter()
        r = await client.call("search.search", {**body, "query": q}, timeout_s=60)
        e2e.append((time.perf_counter() - t) * 1000)
        own.append(r["stats"]["telemetry"]["own_ms"])
        for k in STAGES:
            stages.setdefault(k, []).append(r["stats"]["telemetry"].get(k, 0.0))
        got.append(r["stats"]["candidates"])
        t = time.perf_counter()
        await client.call("search.find", {"query": q, "limit": limit})
        find.append((time.perf_counter() - t) * 1000)
    print(f"\n[{limit} candidates requested; {pct(got, 50):.0f} assembled at p50]")
    print(row("search context end to end over NATS", e2e))
    print(row("Skald's own assembly time (minus embedding)", own))
    print(row("baseline: search.find, same limit, over NATS", find))
    print("  own time by stage, p50 ms: " + ", ".join(f"{k.removesuffix('_ms')} {pct(v, 50):.2f}"
                                                     for k, v in stages.items()))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(7)
    dep = await local("context")
    worker, client = dep.worker, dep.client
    try:
        secs = await load(worker, client, 0, args.size, rng)
        await events(client, 300, rng)
        rows = worker.host.actors["retriever"].index.stats()["rows"]  # type: ignore[union-attr,attr-defined]
        print(f"indexed {args.size} documents in {secs:.1f} s, plus 300 event memories; index rows {rows}")
        queries = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(args.queries)]
        for limit in (10, 100, 1000):
            await measure(client, limit, queries)
        print("\nFloors: own assembly time p50 <= 10 ms with 100 candidates (issue 5), <= 5 ms (issue 15). "
              "OpenViking 0.5.2 takes ~25 ms for a 5-document corpus on this machine (figure from the issue; "
              "not re-measured here).")
    finally:
        await dep.close()


if __name__ == "__main__":
    asyncio.run(main())
