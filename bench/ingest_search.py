"""Search while the vector graph takes in a large ingest: the graph answering for the rows it
holds with only the waiting rows scored (a sign-code shortlist of them once 16,384 wait), against
a pass over every row (`_exact`: the held rows from int8, what a search did while more than
8,000 rows waited), in the same run on the same index.

    .venv/bin/python bench/ingest_search.py                       # 100k rows in the graph, 10k-45k waiting
    .venv/bin/python bench/ingest_search.py --rows 50000 --waiting 5000,20000
    .venv/bin/python bench/ingest_search.py --graph hnsw,sq8      # both graphs, the same rows

Rows are 384-d unit vectors around 200 topic centres (clustered, as embedded text is); queries
are held-out points of the same clusters. Prints p50 / p99 of `VectorIndex.search` and of the
pass over every row, recall@10 of search against brute force over every vector written (numpy,
float32), and the settled figures once the graph holds everything; for each vector graph asked
(`--graph hnsw,sq8`: hnswlib's float32 graph and faiss's over 8-bit codes, the same rows and
queries), one after the other.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from skald.messages.index import IndexRow  # noqa: E402
from skald.store.index import Query, VectorIndex  # noqa: E402

DIM = 384


def vectors(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    v = centres[rng.integers(0, len(centres), n)] + 0.35 * rng.standard_normal((n, DIM)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def batch(start: int, vecs: np.ndarray) -> list[tuple[IndexRow, np.ndarray]]:
    return [(IndexRow(account="a", uri=f"viking://resources/t{(start + i) % 200}/d{start + i}.md", level=2,
                      parent_uri=f"viking://resources/t{(start + i) % 200}", context_type="resource",
                      abstract=f"d{start + i}"), vecs[i]) for i in range(len(vecs))]


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p))]


def timed(fn, queries: np.ndarray) -> tuple[list[float], list[list[str]]]:  # type: ignore[no-untyped-def]
    lat, out = [], []
    for qv in queries:
        t = time.perf_counter()
        hits = fn(qv)
        lat.append((time.perf_counter() - t) * 1000)
        out.append([h.row.uri for h in hits])
    return lat, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000, help="rows already in the graph")
    ap.add_argument("--waiting", default="10000,25000,45000", help="rows written since, waiting for the graph")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--graph", default="hnsw", help="vector graphs to run, one after the other: hnsw, sq8")
    a = ap.parse_args()
    for kind in a.graph.split(","):
        run(a, kind)


def recall_of(found: list[list[str]], mat: np.ndarray, queries: np.ndarray) -> float:
    """recall@10 of `found` (each query's URIs) against brute force over `mat` (float32)."""
    truth = [{f"d{j}.md" for j in np.argsort(-(mat @ v))[:10].tolist()} for v in queries]
    return float(np.mean([len({u.rpartition("/")[2] for u in s} & t) / 10 for s, t in zip(found, truth, strict=True)]))


def run(a: argparse.Namespace, kind: str) -> None:
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((200, DIM)).astype(np.float32)
    idx = VectorIndex(DIM, "m", graph=kind)
    every: list[np.ndarray] = []
    t0 = time.perf_counter()
    for i in range(0, a.rows, 10_000):
        every.append(vectors(min(10_000, a.rows - i), rng, centres))
        idx.upsert_many(batch(i, every[-1]), defer_graph=True)
    while idx.build_graph(20_000, threads=2) > 0:
        pass
    print(f"\n{kind}: {a.rows:,} rows in the graph in {time.perf_counter() - t0:.0f} s")
    queries = vectors(a.queries, rng, centres)
    q = Query(account="a")
    written = a.rows
    print("\n| waiting | search p50 / p99 ms | pass over every row p50 / p99 ms | recall@10 vs brute force | engine |")
    print("|---|---|---|---|---|")
    for waiting in (int(w) for w in a.waiting.split(",")):
        add = waiting - idx.pending_graph
        for i in range(0, add, 10_000):
            n = min(10_000, add - i)
            every.append(vectors(n, rng, centres))
            idx.upsert_many(batch(written, every[-1]), defer_graph=True)
            written += n
        engine = idx.search(queries[0], q, 10)[1].engine
        s_lat, s_out = timed(lambda v: idx.search(v, q, 10)[0], queries)
        e_lat, _ = timed(lambda v: idx._exact(v, q, 10, len(idx))[0], queries)
        recall = recall_of(s_out, np.concatenate(every), queries)
        print(f"| {idx.pending_graph:,} | {pct(s_lat, 0.5):.2f} / {pct(s_lat, 0.99):.2f} | "
              f"{pct(e_lat, 0.5):.2f} / {pct(e_lat, 0.99):.2f} | {recall:.3f} | {engine} |", flush=True)
    t1 = time.perf_counter()
    while idx.build_graph(20_000, threads=2) > 0:
        pass
    s_lat, s_out = timed(lambda v: idx.search(v, q, 10)[0], queries)
    print(f"\nsettled ({written:,} rows in the graph, {time.perf_counter() - t1:.0f} s to take the rest in): "
          f"search p50 / p99 {pct(s_lat, 0.5):.2f} / {pct(s_lat, 0.99):.2f} ms, recall@10 vs brute force "
          f"{recall_of(s_out, np.concatenate(every), queries):.3f}")


if __name__ == "__main__":
    main()
