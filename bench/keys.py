"""What per-key bus identities cost: `search.find` p50/p99 over NATS against the embedded server,
without keys (the single-user default) and with keys (the client logs in as its key's own bus
user, its replies come back on its private inbox, the worker checks the key on every request).
Both deployments run in this process, one after the other, on the same corpus and queries.

    .venv/bin/python bench/keys.py --docs 2000 --queries 400
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

from skald.runtime.bus import keys as key_store  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402
from skald.runtime.host.config import Config  # noqa: E402
from skald.runtime.host.worker import Worker  # noqa: E402

WORDS = ("deploy rollback quota cache shard replica ingest vector token budget session archive memory "
         "resource skill latency cluster region failover canary webhook export audit policy").split()


async def one(label: str, keyed: bool, docs: int, queries: list[str]) -> list[float]:
    tmp = Path(tempfile.mkdtemp(prefix=f"skald-bench-keys-{label}-"))
    cfg = Config.from_env(env={}, data_dir=tmp / "data", embedder="hash", nats_port=-1)
    cfg.nats_url = ""
    cfg.snapshot_interval_s = 3600
    key = None
    if keyed:
        path = tmp / "keys.json"
        key, _ = key_store.add(path, "user", account="default", user="default")
        cfg.keys_file = str(path)
    w = Worker(cfg, embedded=True)
    await w.start()
    try:
        async with await SkaldClient.connect(w.url, prefix=cfg.prefix, api_key=key) as c:
            rng = random.Random(7)
            for i in range(docs):
                text = " ".join(rng.choice(WORDS) for _ in range(40))
                await c.write(f"viking://resources/d{i // 100}/doc{i}.md", f"# Doc {i}\n\n{text}", wait=False)
            await c.write("viking://resources/last.md", "the end", wait=True)
            for q in queries[:30]:  # warm up
                await c.find(q, limit=10)
            out = []
            for q in queries:
                t0 = time.perf_counter()
                await c.find(q, limit=10)
                out.append((time.perf_counter() - t0) * 1000)
            return out
    finally:
        await w.stop()


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3, help="alternate the two deployments this many times")
    a = ap.parse_args()
    rng = random.Random(1)
    queries = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(a.queries)]
    res: dict[str, list[float]] = {"no keys (baseline)": [], "a bus identity per key": []}
    for _ in range(a.rounds):  # alternating evens out drift (thermal, page cache) between the two
        res["no keys (baseline)"] += await one("open", False, a.docs, queries)
        res["a bus identity per key"] += await one("keyed", True, a.docs, queries)
    print(f"search.find over NATS, embedded server, {a.docs} docs, {a.queries} queries x {a.rounds} rounds")
    print(f"{'':28} {'p50 ms':>8} {'p99 ms':>8}")
    for k, v in res.items():
        print(f"{k:28} {statistics.median(v):8.3f} {pct(v, 0.99):8.3f}")
    base, keyed = (statistics.median(v) for v in res.values())
    print(f"cost of per-key identities on p50: {100 * (keyed - base) / base:+.1f} %")


if __name__ == "__main__":
    asyncio.run(main())
