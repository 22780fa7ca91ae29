"""Where an index row's memory goes: rows of section-sized text (about 60 words drawn from a Zipf
vocabulary, as real text is; a tiny vocabulary hides the keyword index's cost) put into a
`VectorIndex` as a replica does, resident memory read after each step, and the Python heap of the
last step attributed to the modules that hold it (tracemalloc).

    .venv/bin/python bench/row_memory.py                 # 50,000 rows
    .venv/bin/python bench/row_memory.py --rows 100000 --no-trace
    .venv/bin/python bench/row_memory.py --rows 100000 --no-trace --batch 256 --codes  # as a replica, identifiers

The baseline is the row's own bytes: its text, abstract and URI as UTF-8 and its float32 vector.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from skald.messages.index import IndexRow  # noqa: E402
from skald.store.index import VectorIndex  # noqa: E402

DIM = 384


def rss() -> int:
    """Resident bytes, after glibc hands back the free pages it keeps (so the figure is what the
    index holds, not what earlier allocations left in the allocator's arenas)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def text_of(rng: np.random.Generator, vocab: list[str], words: int) -> str:
    ranks = np.minimum(rng.zipf(1.1, words), len(vocab)) - 1
    return " ".join(vocab[r] for r in ranks)


def abstract_of(i: int, text: str) -> str:
    """As the indexer writes a section's: its heading path, then its first words within 220
    characters (`›` and `…` in it, as there: Python then keeps the string at two bytes a character)."""
    head = f"Runbook {i // 40} › Step {i % 40}: "
    return head + text[: 219 - len(head)] + "…"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=5_000,
                    help="rows per upsert (a replica applies 256 at a time while it follows the stream)")
    ap.add_argument("--codes", action="store_true",
                    help="each row also holds a code of its own (an identifier: a term in one row, as real text has)")
    ap.add_argument("--no-trace", action="store_true", help="resident memory only (tracemalloc slows the fill)")
    a = ap.parse_args()
    rng = np.random.default_rng(5)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(letters[j] for j in rng.integers(0, 26, 3 + i % 8)) + str(i) for i in range(a.vocab)]
    centres = rng.standard_normal((200, DIM)).astype(np.float32)
    if not a.no_trace:
        tracemalloc.start(1)
    base = rss()
    idx = VectorIndex(DIM, "m")
    own, fill_s = 0, 0.0
    for start in range(0, a.rows, 5_000):  # made in batches, put `--batch` at a time as a replica does
        rows = []
        for i in range(start, min(a.rows, start + 5_000)):
            v = centres[i % 200] + 0.35 * rng.standard_normal(DIM).astype(np.float32)
            v = (v / np.linalg.norm(v)).astype("<f4")
            text = text_of(rng, vocab, 60) + (f" Code R{i // 40}-{i % 40}." if a.codes else "")
            row = IndexRow(account="acme", uri=f"viking://resources/runbooks/r{i // 40:05d}.md#step-{i % 40}",
                           level=2, parent_uri=f"viking://resources/runbooks/r{i // 40:05d}.md",
                           context_type="resource", abstract=abstract_of(i, text), text=text, kind="section",
                           title=f"Step {i % 40}", vector=v.tobytes())
            own += len(text.encode()) + len(row.abstract.encode()) + len(row.uri.encode()) + DIM * 4
            rows.append((row, v))
        t0 = time.perf_counter()
        for j in range(0, len(rows), a.batch):
            idx.upsert_many(rows[j : j + a.batch], defer_graph=True)
        fill_s += time.perf_counter() - t0
        del rows
    gc.collect()
    filled = rss()
    while idx.build_graph(20_000, threads=2) > 0:
        pass
    built = rss()
    n = a.rows
    print(f"{n:,} rows; the row's own bytes (text, abstract, URI, float32 vector): {own / n:,.0f} B a row")
    print("| step | resident | per row |\n|---|---|---|")
    print(f"| rows in the index (vectors, rows, keyword postings), put {a.batch:,} at a time; {fill_s:.1f} s | "
          f"{(filled - base) / 2**20:,.0f} MiB | {(filled - base) / n:,.0f} B |")
    print(f"| graph built | {(built - base) / 2**20:,.0f} MiB | {(built - base) / n:,.0f} B |")
    beside = [(name, getattr(idx, attr)) for name, attr in (("leaf texts", "_texts"), ("float32 vectors", "_qv"))
              if hasattr(idx, attr)]
    for name, part in beside:  # unlinked files: the page cache holds their hot part, not the process
        f = part._f if name == "leaf texts" else part._file
        print(f"| beside it, on disk: {name} | {os.fstat(f.fileno()).st_size / 2**20:,.0f} MiB | "
              f"{os.fstat(f.fileno()).st_size / n:,.0f} B |")
    if not a.no_trace:
        snap = tracemalloc.take_snapshot()
        by_file = snap.statistics("lineno" if os.environ.get("BY_LINE") else "filename")
        print("\nPython heap held after the build, by the module that allocated it (top 8):")
        for st in by_file[:14]:
            print(f"  {st.size / n:8,.0f} B a row  {str(st.traceback[0]).split('site-packages/')[-1]}")
    keep = idx  # held to the end, so the figures above are of a live index
    assert len(keep) == n


if __name__ == "__main__":
    main()
