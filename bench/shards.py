"""One index against the same rows split into shards, each shard's retriever its own process.

The same Zipf-text runbooks (40 sections each, `bench/docs_scale.py`'s generator, hashed embedder)
are indexed through the real pipeline (`fs.mv` of a batch of files, the ingest work queue, the index
log) into two deployments on one nats-server: one retriever process holding the whole index, and
one retriever process per shard (`skald worker --index-shard K/N`). Each has its own indexer and
assembler process. Printed for each: the rows and resident memory of each retriever, the ingest
time, and p50/p99 through NATS of `search.find` over every project (`viking://resources`: every
shard asked, merged), of find inside one project (one shard), and of a context assembly
(1,600 tokens, every shard asked for candidates).

On this 2-core machine the shards' processes share the cores, so what sharding shows here is
memory split per process and what scatter-gather adds to a query, not more throughput.

    .venv/bin/python bench/shards.py                         # 100k section rows, 1 and 2 shards
    .venv/bin/python bench/shards.py --rows 20000 --shards 1,2,4
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nats.errors import TimeoutError as NatsTimeout  # noqa: E402

from bench.docs_scale import SECTIONS_PER_DOC, disk_of, rss_of, zipf_document, zipf_vocabulary  # noqa: E402
from bench.find import pct  # noqa: E402
from skald.messages import errors  # noqa: E402
from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402
from support import processes  # noqa: E402

BATCH_DOCS = 100  # a project directory per batch: 4,000 rows, so projects spread over the shards


async def retrievers(c: SkaldClient, want: int) -> dict[str, Any]:
    """Retriever health by worker id, once `want` of them answer."""
    seen = await processes.worker_ids(c, "retriever", want)
    return {wid: (await processes.direct_health(c, wid)) for wid in seen}


async def settled(c: SkaldClient, want: int, rows: int) -> dict[str, Any]:
    """Retriever healths once they hold `rows` section rows between them, nothing behind, the graph
    built. A replica applying a long tail may answer its health late: asked again."""
    while True:
        try:
            hs = await retrievers(c, want)
        except (NatsTimeout, errors.DeadlineExceeded, errors.Unavailable):
            await asyncio.sleep(1.0)
            continue
        rs = [h["actors"]["retriever"] for h in hs.values()]
        if (sum(r["index"]["level2"] for r in rs) >= rows and all(r["lag"] == 0 for r in rs)
                and not any(r["index"]["graph_pending"] for r in rs)):
            return hs
        await asyncio.sleep(0.5)


async def timed(c: SkaldClient, op: str, body: dict[str, Any]) -> float:
    t = time.perf_counter()
    r = await c.call(op, body, timeout_s=60.0)
    assert not r.get("missing_shards"), r["missing_shards"]
    return (time.perf_counter() - t) * 1000


async def one(shards: int, rows: int, queries: int, seed: int) -> None:
    """One deployment on a nats-server of its own, so its disk and the server's memory are its own."""
    tmp = Path(tempfile.mkdtemp(prefix=f"skald-bench-shards{shards}-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    url = srv.start()
    prefix = f"shards{shards}"
    data = tmp / "data"
    common = {"embedder": "hash", "index_shards": str(shards)}
    procs: list[subprocess.Popen[str]] = []
    try:
        for k in range(shards):
            procs.append(processes.worker(url, data, prefix, "retriever", index_shard=str(k), stderr=subprocess.DEVNULL,
                                          **common))
        procs.append(processes.worker(url, data, prefix, "indexer,assembler", stderr=subprocess.DEVNULL, **common))
        for p in procs:
            processes.wait_ready(p, 120)
        rng = random.Random(seed)
        vocab = zipf_vocabulary(rng)
        async with await SkaldClient.connect(url, prefix=prefix, timeout_s=3600) as c:
            t0 = time.perf_counter()
            docs, projects = 0, []
            while docs * SECTIONS_PER_DOC < rows:
                stage = data / "accounts" / "default" / "resources" / f"stage{docs}"
                stage.mkdir(parents=True)
                for i in range(docs, docs + BATCH_DOCS):
                    (stage / f"runbook{i:07d}.md").write_text(zipf_document(i, rng, vocab))
                project = f"viking://resources/batch{docs:07d}"
                await c.call("fs.mv", {"from_uri": f"viking://resources/stage{docs}", "to_uri": project},
                             timeout_s=3600)
                projects.append(project)
                docs += BATCH_DOCS
            hs = await settled(c, shards, docs * SECTIONS_PER_DOC)
            ingest_s = time.perf_counter() - t0

            def ask() -> str:
                return " ".join(rng.choices(vocab[0], cum_weights=vocab[1], k=4))
            qs = [(ask(), rng.choice(projects)) for _ in range(queries)]
            for q, _ in qs[:20]:  # warm
                await timed(c, "search.find", {"query": q, "target_uri": "viking://resources"})
            span, inside, ctx = [], [], []
            for q, project in qs:
                span.append(await timed(c, "search.find", {"query": q, "target_uri": "viking://resources"}))
                inside.append(await timed(c, "search.find", {"query": q, "target_uri": project}))
                ctx.append(await timed(c, "search.search", {"query": q, "mode": "context", "max_tokens": 1600}))
            held = {h["actors"]["retriever"].get("shard", 0): h["actors"]["retriever"]["index"]["rows"]
                    for h in hs.values()}
            shown = ", ".join(f"{k}: {held[k]:,} rows {rss_of(procs[k].pid):.2f} GB" for k in sorted(held))
            writer_gb, nats_gb = rss_of(procs[-1].pid), rss_of(srv.proc.pid)
            disk_gb = (disk_of(data) + disk_of(tmp / "nats")) / 1e9
            print(f"{shards:>6} | {docs * SECTIONS_PER_DOC:>9,} | {ingest_s:7.0f} | "
                  f"{pct(span, 50):8.2f} {pct(span, 99):7.2f} | {pct(inside, 50):8.2f} {pct(inside, 99):7.2f} | "
                  f"{pct(ctx, 50):8.2f} {pct(ctx, 99):7.2f} | {writer_gb:6.2f} {nats_gb:7.2f} {disk_gb:7.2f} | "
                  f"{shown}", flush=True)
    finally:
        processes.reap(procs)
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # a million rows is about 14 GB on disk


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000, help="section rows in each deployment")
    ap.add_argument("--shards", default="1,2", help="shard counts to compare")
    ap.add_argument("--queries", type=int, default=200)
    a = ap.parse_args()
    print(f"{'shards':>6} | {'sections':>9} | {'ingest s':>7} | {'span p50':>8} {'p99':>7} | "
          f"{'one p50':>8} {'p99':>7} | {'ctx p50':>8} {'p99':>7} | {'writer':>6} {'nats GB':>7} {'disk GB':>7} | "
          "per shard: rows, retriever RSS", flush=True)
    for n in (int(x) for x in a.shards.split(",")):
        await one(n, a.rows, a.queries, seed=7)


if __name__ == "__main__":
    asyncio.run(main())
