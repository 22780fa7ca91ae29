"""Scale-out on this machine: throughput and p99 of a mixed workload (70% find, 20% search
context, 10% add_message) with 1, 2 and 3 retriever+assembler workers and 1 and 2 session
workers, driven by several client processes; find-only throughput with 1 and 2 retrievers;
and how fast a new retriever replica on an empty disk catches up with the index stream.

    .venv/bin/python bench/scale.py [--docs 5000] [--seconds 8] [--clients 3] [--catchup 20000]

Every worker is its own process (`skald worker`), hashed embedder. The machine has 2 cores:
NATS, the workers and the client processes all share them, so scaling beyond ~2x is not
possible here; what is measured is what scales with processes on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import start_worker  # noqa: E402
from bench.find import WORDS, doc_text, pct  # noqa: E402
from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402


def start(url: str, data: Path, prefix: str, actor: str, worker_id: str = "") -> subprocess.Popen[str]:
    return start_worker(url, data, prefix, actor, worker_id=worker_id)


def cpu_s(ps: list[subprocess.Popen[str]]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in ps:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def stop(ps: list[subprocess.Popen[str]]) -> None:
    for p in ps:
        p.send_signal(signal.SIGTERM)
    for p in ps:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def client_proc(url: str, prefix: str, seconds: float, concurrency: int, mix: str, seed: int, out: Any) -> None:
    async def run() -> tuple[int, list[float]]:
        c = await SkaldClient.connect(url, prefix=prefix, timeout_s=30)
        rng = random.Random(seed)
        lat: list[float] = []
        end = time.monotonic() + seconds
        n = 0

        async def one(k: int) -> None:
            nonlocal n
            while time.monotonic() < end:
                q = " ".join(rng.choice(WORDS) for _ in range(3))
                roll = rng.random() if mix == "mixed" else 0.0
                t = time.perf_counter()
                if roll < 0.7:
                    await c.call("search.find", {"query": q})
                elif roll < 0.9:
                    await c.call("search.search", {"query": q, "mode": "context"})
                else:
                    await c.call("sessions.add_message", {"session_id": f"b{seed}-{k % 8}", "role": "user",
                                                          "parts": [{"type": "text", "text": q}]})
                lat.append((time.perf_counter() - t) * 1000)
                n += 1

        await asyncio.gather(*(one(k) for k in range(concurrency)))
        await c.close()
        return n, lat

    out.put(asyncio.run(run()))


def drive(url: str, prefix: str, seconds: float, clients: int, concurrency: int, mix: str) -> tuple[float, float]:
    q: Any = mp.Queue()
    ps = [mp.Process(target=client_proc, args=(url, prefix, seconds, concurrency, mix, i, q)) for i in range(clients)]
    for p in ps:
        p.start()
    results = [q.get() for _ in ps]
    for p in ps:
        p.join()
    total = sum(n for n, _ in results)
    lat = [x for _, xs in results for x in xs]
    return total / seconds, pct(lat, 99)


async def load_docs(url: str, prefix: str, data: Path, n: int) -> None:
    rng = random.Random(1)
    src = data.parent / f"corpus-{prefix}"
    for i in range(n):
        d = src / f"t{i % 50:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"d{i:06d}.md").write_text(doc_text(i % 50, i, rng))
    async with await SkaldClient.connect(url, prefix=prefix, timeout_s=3600) as c:
        await c.call("resources.add", {"path": str(src), "wait": True}, timeout_s=3600)


async def catchup(url: str, data: Path, prefix: str, rows_target: int) -> None:
    base = [start(url, data, prefix, "indexer"), start(url, data, prefix, "retriever", worker_id="base-replica")]
    try:
        t = time.perf_counter()
        await load_docs(url, prefix, data, rows_target)
        print(f"\nloaded {rows_target} documents in {time.perf_counter() - t:.1f} s")
        async with await SkaldClient.connect(url, prefix=prefix) as c:
            msg = await c.nc.request(f"{prefix}.direct.base-replica.system.health", b"{}", timeout=5)
            rows = json.loads(msg.data)["result"]["actors"]["retriever"]["index"]["rows"]
            fresh_data = data.parent / f"{data.name}-fresh"
            fresh_data.mkdir()
            (fresh_data / "accounts").symlink_to(data / "accounts")  # same tree, empty replica directory
            t = time.perf_counter()
            p = start(url, fresh_data, prefix, "retriever", worker_id="fresh-replica")
            ready = time.perf_counter()
            while True:
                msg = await c.nc.request(f"{prefix}.direct.fresh-replica.system.health", b"{}", timeout=5)
                r = json.loads(msg.data)["result"]["actors"]["retriever"]
                if r["lag"] == 0 and r["index"]["rows"] >= rows:
                    break
                await asyncio.sleep(0.05)
            done = time.perf_counter()
            print(f"new replica on an empty disk: process up in {ready - t:.2f} s, then {rows} rows caught up in "
                  f"{done - ready:.2f} s = {rows / (done - ready):,.0f} rows/s (floor 5,000)")
            stop([p])
    finally:
        stop(base)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--catchup", type=int, default=20000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-scale-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    url = srv.start()
    data = tmp / "data"
    print(f"{os.cpu_count()} cores; {args.clients} client processes x {args.concurrency} in flight; "
          f"{args.seconds:.0f} s per row")
    fixed = [start(url, data, "sc", "indexer"), start(url, data, "sc", "archive")]
    try:
        retrievers = [start(url, data, "sc", "retriever")]
        await load_docs(url, "sc", data, args.docs)
        assemblers = [start(url, data, "sc", "assembler")]
        sessions = [start(url, data, "sc", "session")]
        c0 = cpu_s(retrievers)
        rps, p99 = drive(url, "sc", args.seconds, args.clients, args.concurrency, "find")
        per_req_ms = (cpu_s(retrievers) - c0) / (rps * args.seconds) * 1000
        base_find = rps
        print(f"\nfind only, 1 retriever:              {rps:8.0f} req/s   p99 {p99:7.1f} ms   "
              f"(retriever CPU {per_req_ms:.3f} ms per find)")
        retrievers.append(start(url, data, "sc", "retriever"))
        rps, p99 = drive(url, "sc", args.seconds, args.clients, args.concurrency, "find")
        print(f"find only, 2 retrievers:             {rps:8.0f} req/s   p99 {p99:7.1f} ms   "
              f"({rps / base_find:.2f}x)")
        cores = os.cpu_count() or 1
        print(f"projection: a retriever spends {per_req_ms:.3f} ms of CPU per find, so one core serves "
              f"~{1000 / per_req_ms:,.0f} finds/s and N retrievers on N free cores ~N x that (workers share "
              f"nothing but the bus); here {cores} cores also run NATS and the {args.clients} client processes, "
              f"so a second retriever only takes CPU from them")
        stop(retrievers[1:])
        retrievers = retrievers[:1]
        print()
        for n_ra in (1, 2, 3):
            while len(retrievers) < n_ra:
                retrievers.append(start(url, data, "sc", "retriever"))
                assemblers.append(start(url, data, "sc", "assembler"))
            for n_s in (1, 2):
                while len(sessions) < n_s:
                    sessions.append(start(url, data, "sc", "session"))
                while len(sessions) > n_s:
                    stop([sessions.pop()])
                rps, p99 = drive(url, "sc", args.seconds, args.clients, args.concurrency, "mixed")
                print(f"mixed, {n_ra} retriever+assembler, {n_s} session: {rps:8.0f} req/s   p99 {p99:7.1f} ms")
        stop(retrievers + assemblers + sessions)
    finally:
        stop(fixed)
    await catchup(url, tmp / "cdata", "cu", args.catchup)
    srv.stop()


if __name__ == "__main__":
    asyncio.run(main())
