"""What the HTTP gateway adds: find and search(mode="context") through `skald http` and through
the gateway `skald up --http-port` serves in the actors' own process, vs directly over NATS,
against the same deployment in the same run.

    .venv/bin/python bench/gateway.py [--docs 2000] [--queries 300]

`skald up` (hashed embedder, with its in-process gateway) and `skald http` run as their own
processes; this process is the client, with one keep-alive HTTP connection to each gateway
(aiohttp, the faster Python HTTP client; httpx adds about half a millisecond of its own) and one
NATS connection (SkaldClient). Requests alternate between the three paths.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.find import WORDS, doc_text, pct, row  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    rng = random.Random(3)
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-gw-"))
    env = {**os.environ, "SKALD_EMBEDDER": "hash", "SKALD_NATS_PORT": "-1"}
    inproc = free_port()
    up = subprocess.Popen([str(BIN / "skald"), "up", "--data-dir", str(tmp / "data"), "--http-port", str(inproc)],
                          env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    m = re.match(r"skald ready (nats://\S+)", up.stdout.readline())  # type: ignore[union-attr]
    assert m, "skald up did not start"
    url = m.group(1)
    port = free_port()
    gw = subprocess.Popen([str(BIN / "skald"), "http", "--nats-url", url, "--port", str(port)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = await SkaldClient.connect(url)
    base, base_in = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{inproc}"
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
    http_in = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
    try:
        src = tmp / "corpus"
        for i in range(args.docs):
            d = src / f"topic{i % 50:02d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"doc{i:05d}.md").write_text(doc_text(i % 50, i, rng))
        t = time.perf_counter()
        await client.add_resource(path=str(src), wait=True)
        print(f"indexed {args.docs} documents in {time.perf_counter() - t:.1f} s")
        for _ in range(100):
            try:
                async with http.get(base + "/health") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
        queries = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(args.queries)]
        bodies = {"find": ("search.find", "/api/v1/search/find", {"limit": 10}),
                  "search context": ("search.search", "/api/v1/search/search",
                                     {"mode": "context", "score_threshold": 0.0, "max_tokens": 1600})}
        for label, (op, path, extra) in bodies.items():
            for q in queries[:20]:
                await client.call(op, {"query": q, **extra})
                for session, url in ((http, base), (http_in, base_in)):
                    async with session.post(url + path, json={"query": q, **extra}) as r:
                        r.raise_for_status()
                        await r.read()
            nats_ms, http_ms, in_ms = [], [], []
            for q in queries:
                t = time.perf_counter()
                await client.call(op, {"query": q, **extra})
                nats_ms.append((time.perf_counter() - t) * 1000)
                for session, url, out in ((http, base, http_ms), (http_in, base_in, in_ms)):
                    t = time.perf_counter()
                    async with session.post(url + path, json={"query": q, **extra}) as r:
                        await r.read()
                    out.append((time.perf_counter() - t) * 1000)
                    assert r.status == 200
            print(f"\n[{label}]")
            print(row("directly over NATS", nats_ms))
            print(row("through `skald http`", http_ms))
            print(row("through `skald up --http-port`", in_ms))
            print(f"  `skald http` adds p50 {pct(http_ms, 50) - pct(nats_ms, 50):.3f} ms "
                  f"(floor: <= 1.5 ms), p99 {pct(http_ms, 99) - pct(nats_ms, 99):.3f} ms; in-process "
                  f"p50 {pct(in_ms, 50) - pct(nats_ms, 50):.3f} ms, p99 {pct(in_ms, 99) - pct(nats_ms, 99):.3f} ms")
    finally:
        await http.close()
        await http_in.close()
        await client.close()
        for p in (gw, up):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
