"""BM25 alone at scale: exact scoring beside champion lists, in the same run, on one index.

    .venv/bin/python bench/keywords.py [--rows 1000000] [--queries 300]

Rows are 60 words drawn from a Zipf-distributed vocabulary of 50,000 (exponent 1.07, as in
English text), one row in a thousand rewritten after the load (a changed file, a refreshed
summary). Queries hold one or two frequent words and one or two of middling frequency. For each
setting: search p50 / p90 for the top 100, and for the top 10, the share of the exact top 10's
BM25 score mass the returned rows carry, and their overlap with the exact top 10 (ties make the
exact run itself fall short of 1.0).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skald.store import bm25  # noqa: E402
from skald.store.bm25 import KeywordIndex  # noqa: E402
from skald.store.terms import query_terms  # noqa: E402

VOCAB = 50_000
WORDS_PER_ROW = 60


def build(rows: int) -> KeywordIndex:
    rng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, VOCAB + 1) ** 1.07
    weights /= weights.sum()
    vocab = [f"w{i}x" for i in range(VOCAB)]
    kw = KeywordIndex()
    for start in range(0, rows, 10_000):
        ids = rng.choice(VOCAB, size=(min(10_000, rows - start), WORDS_PER_ROW), p=weights)
        for j, row in enumerate(ids):
            kw.add(start + j, " ".join(vocab[k] for k in row))
    for label in range(0, rows, 1000):
        kw.add(label, " ".join(vocab[k] for k in rng.choice(VOCAB, size=WORDS_PER_ROW, p=weights)))
    return kw


def queries(n: int) -> list[str]:
    r = random.Random(5)
    return [" ".join([f"w{r.randrange(0, 50)}x" for _ in range(r.randint(1, 2))]
                     + [f"w{r.randrange(50, 5000)}x" for _ in range(r.randint(1, 2))]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=300)
    a = ap.parse_args()
    t0 = time.perf_counter()
    kw = build(a.rows)
    print(f"{a.rows:,} rows indexed in {time.perf_counter() - t0:.0f} s", flush=True)
    qs = queries(a.queries)

    def every(labels: np.ndarray) -> np.ndarray:
        return np.ones(labels.size, dtype=bool)

    exact = {}
    for q in qs:
        hit, scores, _ = kw._scores(query_terms(q), prune=False)
        exact[q] = dict(zip(hit.tolist(), scores.tolist(), strict=True))

    def run(name: str) -> None:
        for p in kw._post:
            p.champ = None
        kw._weighed.clear()  # a champion list's weights are kept until the next write: one setting's
        kw._weighed_size = 0  # lists would otherwise be scored again under the next setting's name
        for q in qs[:20]:
            kw.search(q, 100, every)
        lat, share, overlap = [], [], []
        for q in qs:
            t = time.perf_counter()
            labels = kw.search(q, 100, every)[0][:10].tolist()
            lat.append((time.perf_counter() - t) * 1000)
            e = exact[q]
            best = sorted(e, key=lambda lab: (-e[lab], lab))[:10]
            share.append(sum(e.get(lab, 0.0) for lab in labels) / max(sum(e[lab] for lab in best), 1e-9))
            overlap.append(len(set(best) & set(labels)) / max(1, len(best)))
        lat.sort()
        print(f"{name:<28} | {lat[len(lat) // 2]:8.2f} {lat[int(len(lat) * 0.9)]:7.2f} | "
              f"{np.mean(share):16.4f} | {np.mean(overlap):12.3f}", flush=True)

    print(f"{'setting':<28} | {'p50 ms':>8} {'p90':>7} | {'top-10 score mass':>16} | {'top-10 overlap':>12}")
    default = bm25.CHAMPIONS
    bm25.CHAMPIONS_FROM = 10**12
    run("exact (baseline)")
    for size in sorted({4096, default, 32768}):
        bm25.CHAMPIONS, bm25.CHAMPIONS_FROM = size, 4 * size
        run(f"champions {size:,}" + (" (default)" if size == default else ""))


if __name__ == "__main__":
    main()
