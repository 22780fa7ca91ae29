"""The two stores side by side on a three-node JetStream cluster on loopback (streams at replicas 3):
`--store local` (the tree on the worker's disk) against `--store jetstream` (the tree in the
cluster's buckets), each on a fresh deployment, alternating, the same requests.

    .venv/bin/python bench/store.py [--rounds 2] [--messages 3000] [--commits 100] [--docs 200]
    .venv/bin/python bench/store.py --cold-rows 100000   # and a fresh worker's start on an empty disk
    .venv/bin/python bench/store.py --against HEAD~1     # each round also on that commit's code

Reports per store: add_message throughput (200 sessions, 64 in flight, every reply durable and, on
jetstream, replicated), commit Phase 1 p50/p99, fs.write p50/p99 (the write durable, its ingest
queued: `wait: false`) back to back (each one's ingest running behind the next ones) and alone (its
ingest done before the next), fs.write with its indexing awaited (the default), find and context
p50/p99 over `--docs` foldered notes. With `--cold-rows`: that many index rows are ingested, then a worker starts
on an empty data directory and the time until it answers a find over them is printed.
Workers are `skald worker` processes with every actor and the hashed embedder.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import code_at, start_worker  # noqa: E402
from bench.sessions import pct, phase1, throughput  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402
from support.cluster import Cluster  # noqa: E402

ACTORS = "session,archive,indexer,retriever,assembler"
WORDS = ("backup restore failover replica primary latency index shard quorum leader election snapshot "
         "compaction retention ingest vector keyword tenant session archive marker memory budget token "
         "glacier moulin crevasse survey drill core sample meltwater ablation firn").split()


def note(rng: random.Random, i: int) -> str:
    body = " ".join(rng.choice(WORDS) for _ in range(60))
    return f"# Note {i}\n\n{body}.\n"


async def timed(calls: list, repeat: int = 1) -> list[float]:
    out = []
    for _ in range(repeat):
        for call in calls:
            t = time.perf_counter()
            await call()
            out.append((time.perf_counter() - t) * 1000)
    return out


async def one(cluster: Cluster, tmp: Path, store: str, tag: str, args: argparse.Namespace,
              code: Path | None = None) -> dict[str, float]:
    prefix = f"st{tag}"
    p = start_worker(cluster.url, tmp / f"data-{tag}", prefix, ACTORS, code=code, stream_replicas="3", store=store)
    try:
        async with await SkaldClient.connect(cluster.urls, prefix=prefix, timeout_s=60.0) as c:
            await throughput(c, 200, 50, 32)  # warm-up
            rate = await throughput(c, args.messages, 200, 64)
            p1 = await phase1(c, args.commits)
            rng = random.Random(7)
            writes = await timed([lambda i=i: c.call("fs.write", {
                "uri": f"viking://resources/notes/t{i % 10}/n{i}.md", "content": note(rng, i), "wait": False})
                for i in range(args.docs)])
            await c.call("fs.write", {"uri": "viking://resources/notes/drain.md", "content": "# Drain\n",
                                      "wait": True}, timeout_s=600.0)  # behind the ingests those queued

            async def alone(i: int) -> None:  # its ingest done before the next write
                await c.call("fs.write", {"uri": f"viking://resources/notes/a{i % 10}/n{i}.md",
                                          "content": note(rng, i), "wait": False})

            lone = []
            for i in range(40):
                lone += await timed([lambda i=i: alone(i)])
                await asyncio.sleep(0.2)
            indexed = await timed([lambda i=i: c.call("fs.write", {
                "uri": f"viking://resources/notes/t{i % 10}/n{i}.md", "content": note(rng, i)})
                for i in range(args.docs, args.docs + 50)])
            await c.call("fs.write", {"uri": "viking://resources/notes/last.md", "content": "# Last\n", "wait": True})
            queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(50)]
            finds = await timed([lambda q=q: c.call("search.find", {"query": q, "limit": 10}) for q in queries], 2)
            ctxs = await timed([lambda q=q: c.call("search.search", {"query": q, "mode": "context",
                                                                      "max_tokens": 1600}) for q in queries], 2)
        return {"add_message": rate, "p1_50": pct(p1, 50), "p1_99": pct(p1, 99), "write_50": pct(writes, 50),
                "write_99": pct(writes, 99), "lone_50": pct(lone, 50), "lone_99": pct(lone, 99),
                "indexed_50": pct(indexed, 50), "indexed_99": pct(indexed, 99),
                "find_50": pct(finds[50:], 50), "find_99": pct(finds[50:], 99),
                "ctx_50": pct(ctxs[50:], 50), "ctx_99": pct(ctxs[50:], 99)}
    finally:
        p.terminate()
        p.wait()


async def cold_start(cluster: Cluster, tmp: Path, rows: int) -> None:
    """`rows` section rows ingested on jetstream; then a worker on an empty disk, timed until it
    answers a find that reaches them."""
    prefix = "cold"
    p = start_worker(cluster.url, tmp / "cold-a", prefix, ACTORS, stream_replicas="3", store="jetstream")
    rng = random.Random(3)
    try:
        async with await SkaldClient.connect(cluster.urls, prefix=prefix, timeout_s=1800.0) as c:
            per_doc = 40  # sections of one generated runbook
            docs = rows // per_doc
            t0 = time.perf_counter()
            for start in range(0, docs, 50):
                await asyncio.gather(*(c.call("resources.add", {
                    "content": "\n".join(f"## Step {s}\n\n{' '.join(rng.choice(WORDS) for _ in range(60))}.\n"
                                         for s in range(per_doc)),
                    "name": f"runbook-{i}.md", "wait": True}) for i in range(start, min(docs, start + 50))))
            print(f"cold start: {docs} runbooks ({docs * per_doc} section rows) ingested in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        p.terminate()
        p.wait()
    t0 = time.perf_counter()
    q = start_worker(cluster.url, tmp / "cold-b", prefix, ACTORS, stream_replicas="3", store="jetstream")
    try:
        async with await SkaldClient.connect(cluster.urls, prefix=prefix, timeout_s=120.0) as c:
            ready = time.perf_counter() - t0
            while True:  # until its replica holds every row of the index stream, and a find reaches them
                h = (await c.call("system.health"))["actors"]["retriever"]
                if h["lag"] == 0 and h["applied_seq"] > 0 and h["index"]["rows"] >= rows:
                    r = await c.call("search.find", {"query": "glacier moulin survey", "limit": 10})
                    if r["resources"]:
                        break
                await asyncio.sleep(0.2)
            took = time.perf_counter() - t0
            print(f"cold start: a worker on an empty disk ready {ready:.1f} s after its start; its replica held "
                  f"{h['index']['rows']} rows and find answered over them {took:.1f} s after its start "
                  f"({len(r['resources'])} hits)")
    finally:
        q.terminate()
        q.wait()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--cold-rows", type=int, default=0)
    ap.add_argument("--against", default="",
                    help="a git ref whose code runs each round too, alternating with this tree's")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-store-"))
    cluster = Cluster(tmp / "nats")
    await cluster.start()
    await cluster.ready()
    codes: list[tuple[str, Path | None]] = [("", None)]
    if args.against:
        codes.append((f" ({args.against})", code_at(args.against, tmp)))
    got: dict[str, list[dict[str, float]]] = {f"{s}{n}": [] for s in ("local", "jetstream") for n, _ in codes}
    try:
        for r in range(args.rounds):
            # Which code runs first alternates by round: the first run of a round was the slower one for
            # paths neither code changed (Phase 1, add_message).
            turn = codes if r % 2 == 0 else codes[::-1]
            for store, (name, code) in ((s, c) for s in ("local", "jetstream") for c in turn):
                m = await one(cluster, tmp, store, f"{store[0]}{r}{len(name)}", args, code)
                got[f"{store}{name}"].append(m)
                print(f"round {r + 1} {store + name:>9}: add_message {m['add_message']:6.0f} msgs/s, Phase 1 p50 "
                      f"{m['p1_50']:.2f} ms, fs.write p50 {m['write_50']:.2f} ms, find p50 {m['find_50']:.2f} ms, "
                      f"context p50 {m['ctx_50']:.2f} ms", flush=True)
        if not args.rounds:
            await cold_start(cluster, tmp, args.cold_rows)
            return
        print(f"\nmedians of {args.rounds} rounds, 3-node cluster on loopback, streams R3:")
        print(f"{'':>10} {'add_message/s':>14} {'Phase1 p50/p99':>16} {'fs.write p50/p99':>18} "
              f"{'(alone) p50/p99':>18} {'+indexed p50/p99':>18} {'find p50/p99':>14} {'context p50/p99':>16}")
        for store, ms in got.items():
            def med(k: str, ms: list[dict[str, float]] = ms) -> float:
                return statistics.median(m[k] for m in ms)
            print(f"{store:>10} {med('add_message'):14.0f} {med('p1_50'):8.2f}/{med('p1_99'):<7.2f} "
                  f"{med('write_50'):9.2f}/{med('write_99'):<8.2f} {med('lone_50'):9.2f}/{med('lone_99'):<8.2f} "
                  f"{med('indexed_50'):9.2f}/{med('indexed_99'):<8.2f} "
                  f"{med('find_50'):7.2f}/{med('find_99'):<6.2f} "
                  f"{med('ctx_50'):8.2f}/{med('ctx_99'):<7.2f}")
        print("\nFloors (jetstream): add_message >= 1,500 msgs/s; Phase 1 p50 <= 25 ms; fs.write p50 <= 10 ms; "
              "find and context p50 within 10 % of local.")
        if args.cold_rows:
            await cold_start(cluster, tmp, args.cold_rows)
    finally:
        await asyncio.to_thread(cluster.stop)


if __name__ == "__main__":
    asyncio.run(main())
