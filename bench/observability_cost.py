"""What observability costs a request: `search.find` p50 over NATS with tracing off and on
(OpenTelemetry spans batched over OTLP/HTTP to a collector this bench starts), at full and at 10 %
sampling, each compared with requests without tracing interleaved one by one in the same run (a
machine's drift between separate runs is larger than the cost); and the time of the metric calls
the host makes for every request and of a `/metrics` scrape. Metrics are always on.

    .venv/bin/python bench/observability_cost.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
import timeit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import generate_latest  # noqa: E402

from bench.deploy import local  # noqa: E402
from skald.runtime.client import tracing  # noqa: E402


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that accepts and drops what it is sent, counting its bytes."""

    received = 0

    def do_POST(self) -> None:  # noqa: N802 - the http.server interface
        Collector.received += len(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def interleaved(c: object, n: int) -> tuple[list[float], list[float]]:
    """n finds with tracing as set up and n without, in pairs asking the same query, which of the
    two goes first alternating (the second of a pair finds the caches warm); their times."""
    on: list[float] = []
    off: list[float] = []
    for i in range(2 * n):
        query = f"topic {i // 2 % 37}"
        t0 = time.perf_counter()
        if (i + i // 2) % 2:
            with tracing.suspended():
                await c.find(query)  # type: ignore[attr-defined]
            off.append(time.perf_counter() - t0)
        else:
            await c.find(query)  # type: ignore[attr-defined]
            on.append(time.perf_counter() - t0)
    return on, off


def ms(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q * 100) - 1] * 1000


async def main(docs: int = 2000, queries: int = 2000) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}/v1/traces"
    d = await local("observability-cost")
    try:
        c = d.client
        for i in range(0, docs, 200):
            await asyncio.gather(*(c.write(f"viking://resources/m/{j}.md", f"note {j} about topic {j % 37}")
                                   for j in range(i, i + 200)))
        for _ in range(50):
            await c.find("topic 3")
        print(f"find over NATS, {queries} with and {queries} without tracing interleaved, {docs} docs, hashed "
              "embedder; one span per find (the worker's)")
        for sample in (1.0, 0.1):
            tracing.setup("otlp", "skald-bench", endpoint, sample=sample)
            on, off = await interleaved(c, queries)
            await asyncio.to_thread(tracing.shutdown)
            p_on, p_off = statistics.median(on), statistics.median(off)
            print(f"  {sample:>4.0%} sampled: p50 {p_off * 1000:.3f} -> {p_on * 1000:.3f} ms "
                  f"({(p_on / p_off - 1) * 100:+.1f} %, {(p_on - p_off) * 1e6:+.0f} us), "
                  f"p95 {ms(off, 0.95):.3f} -> {ms(on, 0.95):.3f} ms")
        print(f"  ({Collector.received / 1024:.0f} KiB of OTLP received by the collector)")
        m = d.worker.metrics
        n = 200_000
        per_request = timeit.timeit(lambda: (m.requests.labels("search.find", "OK").inc(),
                                             m.latency.labels("search.find").observe(0.0004)), number=n) / n
        scrape = timeit.timeit(lambda: generate_latest(m.registry), number=50) / 50
        print(f"metric calls per request: {per_request * 1e6:.2f} us = {per_request / p_off * 100:.2f} % of find p50")
        print(f"one /metrics scrape: {scrape * 1000:.2f} ms (off the request path; every 15 s by default)")
    finally:
        await d.close()
        server.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
