"""What metrics cost a request: `search.find` p50 over NATS beside the time of the metric calls the
host makes for every request (one counter increment, one histogram observation) and of a
`/metrics` scrape, measured in the same run. Metrics are always on; their cost is this share.

    .venv/bin/python bench/metrics_cost.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import generate_latest  # noqa: E402

from bench.deploy import local  # noqa: E402


async def main(docs: int = 2000, queries: int = 400) -> None:
    d = await local("metrics-cost")
    try:
        c = d.client
        for i in range(0, docs, 200):
            await asyncio.gather(*(c.write(f"viking://resources/m/{j}.md", f"note {j} about topic {j % 37}")
                                   for j in range(i, i + 200)))
        for _ in range(50):
            await c.find("topic 3")
        took = []
        for i in range(queries):
            t0 = time.perf_counter()
            await c.find(f"topic {i % 37}")
            took.append(time.perf_counter() - t0)
        p50 = statistics.median(took)
        m = d.worker.metrics
        n = 200_000
        per_request = timeit.timeit(lambda: (m.requests.labels("search.find", "OK").inc(),
                                             m.latency.labels("search.find").observe(0.0004)), number=n) / n
        scrape = timeit.timeit(lambda: generate_latest(m.registry), number=50) / 50
        print(f"find p50 over NATS: {p50 * 1000:.3f} ms ({queries} queries, {docs} docs, hashed embedder)")
        print(f"metric calls per request: {per_request * 1e6:.2f} us = {per_request / p50 * 100:.2f} % of find p50")
        print(f"one /metrics scrape: {scrape * 1000:.2f} ms (off the request path; every 15 s by default)")
    finally:
        await d.close()


if __name__ == "__main__":
    asyncio.run(main())
