"""Skald beside OpenViking 0.5.2 on one machine: the same documents, the same OpenAI-compatible
embeddings server on loopback (`bench/model_server.py`, its own process), find and context
assembly asked of both, alternating, every query different (neither system may answer from a
query-vector cache). Each system's own cost is its p50 minus the embedding round trip measured
in the same run.

OpenViking is installed by this bench into its own virtual environment (never a dependency of
Skald) and run as `openviking-server`; Skald as `skald up --http-port` (every actor, embedded
nats-server, OpenViking's HTTP API in the same process), asked over NATS with Skald's client and
over HTTP, so the HTTP columns compare like with like.

    .venv/bin/python bench/vs_openviking.py                       # 100 documents, 200 rounds
    .venv/bin/python bench/vs_openviking.py --skald-rows 100000   # and Skald alone at 100k rows
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import openviking_sdk as ov

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skald.runtime.client.api import SkaldClient  # noqa: E402

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent
OV_VERSION = "0.5.2"
SERVICES = "caddy nginx postgres redis kafka grafana vault consul etcd minio".split()
VERBS = "restart rotate drain resize migrate patch reload snapshot".split()


def document(i: int) -> str:
    """A runbook with a host, a service, a port and steps: unique facts a query can aim at."""
    svc, verb = SERVICES[i % len(SERVICES)], VERBS[(i // len(SERVICES)) % len(VERBS)]
    host, port = f"host-{i:03d}", 20000 + i * 7
    steps = "\n".join(f"{k + 1}. Step {k + 1} to {verb} {svc} on {host}: check the unit, then watch its log "
                      f"for errors for {k + 2} minutes." for k in range(6))
    return (f"# Runbook {i}: {verb} {svc} on {host}\n\n{svc} on {host} listens on port {port}. Ticket OPS-{4000 + i} "
            f"tracks the last change, owned by team {['atlas', 'borealis', 'cygnus', 'draco'][i % 4]}.\n\n"
            f"## Steps\n\n{steps}\n\n## Rollback\n\nIf {svc} on {host} fails after the {verb}, restore the previous "
            f"configuration from the backup taken before step 1 and page the owning team.\n")


def queries(n: int, docs: int, seed: int = 11) -> list[str]:
    """`n` different questions about the documents (no two alike, so no cache answers one)."""
    rng = random.Random(seed)
    forms = ["which port does {svc} on host-{i:03d} listen on", "how do I {verb} {svc} on host-{i:03d}",
             "rollback after a failed {verb} of {svc} host-{i:03d}", "who owns ticket OPS-{t} for {svc}"]
    out: list[str] = []
    while len(out) < n:
        i = rng.randrange(docs)
        q = rng.choice(forms).format(svc=SERVICES[i % len(SERVICES)], verb=rng.choice(VERBS), i=i, t=4000 + i)
        q = f"{q} ({len(out)})"
        out.append(q)
    return out


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] if s else float("nan")


def ensure_openviking(venv: Path) -> Path:
    """The `openviking-server` of a virtual environment of its own, installed on first use."""
    server = venv / "bin" / "openviking-server"
    if not server.exists():
        print(f"installing openviking=={OV_VERSION} into {venv} (once) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"openviking=={OV_VERSION}"], check=True)
    return server


def start(cmd: list[str], ready: Callable[[str], str | None], env: dict[str, str], cwd: Path,
          log: Path) -> tuple[subprocess.Popen[str], str]:
    """A server process and what `ready` finds in its first lines of output."""
    out = log.open("w")
    p = subprocess.Popen(cmd, env=env, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=out)
    assert p.stdout is not None
    for line in p.stdout:
        out.write(line)
        got = ready(line)
        if got:
            return p, got
    raise SystemExit(f"{cmd[0]} exited before it was ready; see {log}")


async def wait_http(url: str, timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as h:
        while time.monotonic() < end:
            try:
                if (await h.get(url)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{url} did not answer in {timeout_s:.0f}s")


async def timed(call: Awaitable[Any]) -> float:
    t = time.perf_counter()
    await call
    return (time.perf_counter() - t) * 1000


async def embed_once(session: aiohttp.ClientSession, base: str, text: str) -> None:
    async with session.post(f"{base}/embeddings", json={"input": [f"query: {text}"], "model": "hash"}) as r:
        r.raise_for_status()
        await r.read()


def ok(r: httpx.Response) -> dict[str, Any]:
    r.raise_for_status()
    body = r.json()
    if body.get("status") != "ok":
        raise RuntimeError(f"{r.request.url}: {body}")
    return body["result"]  # type: ignore[no-any-return]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=200, help="requests of each kind to each system")
    ap.add_argument("--ov-venv", type=Path, default=Path.home() / ".cache" / "skald-bench" / f"openviking-{OV_VERSION}")
    ap.add_argument("--flames", default=str(HERE / "flames"),
                    help="where the flame graphs of Skald's find and context go (needs py-spy; '' skips)")
    ap.add_argument("--skald-rows", type=int, default=0,
                    help="after the side-by-side, fill Skald to this many documents and measure it alone")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-vs-ov-"))
    ov_server = ensure_openviking(args.ov_venv)
    procs: list[subprocess.Popen[str]] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKALD_", "OPENVIKING_"))}
    try:
        model, port = start([sys.executable, str(HERE / "model_server.py")], lambda s: s.strip() or None, env, tmp,
                            tmp / "model.log")
        procs.append(model)
        base = f"http://127.0.0.1:{port}/v1"
        # OpenViking: its HTTP server, local storage, both models on the loopback server.
        conf = {"storage": {"workspace": str(tmp / "ov-data"), "vectordb": {"name": "context", "backend": "local"},
                            "agfs": {"backend": "local"}},
                "embedding": {"dense": {"api_base": base, "api_key": "x", "provider": "openai", "dimension": 384,
                                        "model": "hash"}},
                "vlm": {"api_base": base, "api_key": "x", "provider": "openai", "model": "stub"}}
        (tmp / "ov.conf").write_text(json.dumps(conf))
        ov_port = 18000 + random.randrange(1000)
        ov_proc = subprocess.Popen([str(ov_server), "--config", str(tmp / "ov.conf"), "--host", "127.0.0.1",
                               "--port", str(ov_port)], env=env, cwd=tmp, stdout=(tmp / "ov.log").open("w"),
                              stderr=subprocess.STDOUT)
        procs.append(ov_proc)
        ov_url = f"http://127.0.0.1:{ov_port}"
        # Skald: every actor and an embedded nats-server; the same models; its HTTP API in-process.
        skald_env = {**env, "SKALD_EMBEDDER": "openai", "SKALD_EMBED_BASE_URL": base, "SKALD_EMBED_MODEL": "hash",
                     "SKALD_EMBED_DIM": "384", "SKALD_LLM_BASE_URL": base, "SKALD_LLM_MODEL": "stub"}
        gw_port = ov_port + 1000
        up, nats = start([str(BIN / "skald"), "up", "--data-dir", str(tmp / "skald-data"), "--nats-port", "-1",
                          "--http-port", str(gw_port)],
                         lambda s: (m.group(1) if (m := re.match(r"skald ready (nats://\S+)", s)) else None),
                         skald_env, tmp, tmp / "skald.log")
        procs.append(up)
        gw_url = f"http://127.0.0.1:{gw_port}"
        await wait_http(f"{ov_url}/health")
        await wait_http(f"{gw_url}/health")
        c = await SkaldClient.connect(nats, timeout_s=60.0)
        print(f"skald vs openviking {OV_VERSION}: {args.docs} documents, {args.rounds} rounds, data in {tmp}")

        docs = tmp / "docs"
        docs.mkdir()
        for i in range(args.docs):
            (docs / f"runbook-{i:03d}.md").write_text(document(i))
        async with httpx.AsyncClient(base_url=ov_url, timeout=300.0) as ovh, \
                httpx.AsyncClient(base_url=gw_url, timeout=60.0) as gwh:
            sdk = ov.AsyncHTTPClient(url=ov_url, api_key="", user="default", timeout=300)
            await sdk.initialize()
            await sdk.mkdir("viking://resources/bench")
            ov_ingest, sk_ingest = [], []
            for i in range(args.docs):
                path = docs / f"runbook-{i:03d}.md"
                ov_ingest.append(await timed(sdk.add_resource(
                    str(path), parent="viking://resources/bench", wait=True)))
                sk_ingest.append(await timed(c.call("resources.add", {
                    "content": path.read_text(), "name": path.name,
                    "target_uri": f"viking://resources/bench/{path.stem}",
                    "wait": True})))
            print(f"ingest per document p50: OpenViking {pct(ov_ingest, 0.5):.1f} ms, "
                  f"Skald {pct(sk_ingest, 0.5):.1f} ms")

            warm = 10
            qs = queries((args.rounds + warm) * 7, args.docs)
            # The round trip both systems pay, through the fastest client here (aiohttp; httpx adds
            # ~1.6 ms of its own per request), so neither system's own cost is flattered.
            embed = aiohttp.ClientSession()
            lat: dict[str, list[float]] = {}
            ctx = {"mode": "context", "max_tokens": 1600}
            for r in range(args.rounds + warm):
                q = qs[r * 7: r * 7 + 7]
                got = {
                    "embedding round trip": await timed(embed_once(embed, base, q[0])),
                    "OpenViking find (HTTP)": await timed(ovh.post("/api/v1/search/find", json={
                        "query": q[1], "limit": 10})),
                    "Skald find (NATS)": await timed(c.call("search.find", {"query": q[2], "limit": 10})),
                    "Skald find (HTTP)": await timed(gwh.post("/api/v1/search/find", json={
                        "query": q[3], "limit": 10})),
                    "OpenViking context (HTTP)": await timed(ovh.post("/api/v1/search/search", json={
                        "query": q[4], **ctx})),
                    "Skald context (NATS)": await timed(c.call("search.search", {"query": q[5], **ctx})),
                    "Skald context (HTTP)": await timed(gwh.post("/api/v1/search/search", json={
                        "query": q[6], **ctx})),
                }
                if r >= warm:
                    for k, v in got.items():
                        lat.setdefault(k, []).append(v)
            # What each answer holds, so a fast empty answer cannot pass for a cheap one.
            probe = "which port does caddy on host-000 listen on"
            ov_hits = ok(await ovh.post("/api/v1/search/find", json={"query": probe, "limit": 3}))["resources"]
            sk_hits = (await c.call("search.find", {"query": probe, "limit": 3}))["resources"]
            await embed.close()
            await sdk.close()
        rt = pct(lat["embedding round trip"], 0.5)
        print(f"\n| path | p50 ms | p95 ms | own cost p50 (minus embedding {rt:.2f} ms) |")
        print("|---|---|---|---|")
        for k, v in lat.items():
            own = "" if k.startswith("embedding") else f"{pct(v, 0.5) - rt:.2f}"
            print(f"| {k} | {pct(v, 0.5):.2f} | {pct(v, 0.95):.2f} | {own} |")
        for name, hits in (("OpenViking", ov_hits), ("Skald", sk_hits)):
            print(f"{name} top hit for {probe!r}: {hits[0]['uri'] if hits else None}")
        own = {k: pct(v, 0.5) - rt for k, v in lat.items()}
        ratio = {kind: own[f"OpenViking {kind} (HTTP)"] / max(1e-6, own[f"Skald {kind} (NATS)"])
                 for kind in ("find", "context")}
        print(f"own cost, OpenViking / Skald (NATS): find {ratio['find']:.1f}x, context {ratio['context']:.1f}x. "
              "Floors (issue 19): Skald's own cost <= 1.5 ms find, <= 3 ms context at 100 documents.")
        # The same paths with OpenViking idle: alternating, each Skald request follows one of
        # OpenViking's (15-20 ms of its CPU on the same two cores) and pays for what that leaves.
        print("\nSkald alone (OpenViking idle), back to back:")
        await alone(c, base, args.docs, args.rounds)
        if args.flames:
            await flames(c, up.pid, Path(args.flames), qs)
        if args.skald_rows:
            await fill_and_measure(c, base, tmp, args.skald_rows, args.docs, args.rounds)
        await c.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


SPY_SECONDS = 10
FILL_GROUP = 500  # documents a folder, below the indexer's wide-directory threshold


async def flames(c: SkaldClient, pid: int, out: Path, qs: list[str]) -> None:
    """Each Skald path under py-spy while only it runs, one request at a time as measured above:
    a flame graph (`<path>.svg`) and its collapsed stacks (`<path>.txt`), and the frames that hold
    the most samples printed. Skipped when py-spy is not installed (`pip install py-spy`) or may
    not attach (ptrace)."""
    spy = shutil.which("py-spy") or (str(BIN / "py-spy") if (BIN / "py-spy").exists() else None)
    if spy is None:
        print("\nflame graphs skipped: py-spy is not installed")
        return
    out.mkdir(parents=True, exist_ok=True)
    ctx = {"mode": "context", "max_tokens": 1600}
    paths = {"find": lambda q: c.call("search.find", {"query": q, "limit": 10}),
             "context": lambda q: c.call("search.search", {"query": q, **ctx})}
    i = 0
    for name, call in paths.items():
        for fmt, file in (("raw", out / f"{name}.txt"), ("flamegraph", out / f"{name}.svg")):
            proc = await asyncio.create_subprocess_exec(
                spy, "record", "-p", str(pid), "-o", str(file), "-f", fmt, "-r", "200", "-d", str(SPY_SECONDS),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            while proc.returncode is None:
                await call(f"{qs[i % len(qs)]} {i}")  # never the same query twice: no cache answers it
                i += 1
            if proc.returncode != 0:
                err = (await proc.stderr.read()).decode()[-300:] if proc.stderr else ""
                print(f"\nflame graphs skipped: py-spy failed ({err.strip()})")
                return
        print(f"\n{name}: flame graph {out / (name + '.svg')}; busiest frames (share of the worker's busy samples)")
        for frame, share in heaviest(out / f"{name}.txt"):
            print(f"  {share:5.1%}  {frame}")


OWN = re.compile(r"\((actors|runtime|store|messages)/")


def heaviest(collapsed: Path, n: int = 14) -> list[tuple[str, float]]:
    """Skald's own frames by inclusive share of the busy samples (a thread waiting on a queue or
    the event loop's select is idle), below the trunk every sample shares; from py-spy's
    collapsed stacks."""
    idle = ("_worker (concurrent/futures/thread.py", "select (selectors.py", "_run_once (asyncio/base_events.py")
    counts: dict[str, int] = {}
    busy = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n_s = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or any(frames[-1].startswith(x) for x in idle):
            continue
        busy += int(n_s)
        for f in dict.fromkeys(re.sub(r":\d+\)$", ")", f) for f in frames):
            counts[f] = counts.get(f, 0) + int(n_s)
    own = [(f, k / max(1, busy)) for f, k in counts.items() if OWN.search(f) and k < 0.9 * busy]
    return sorted(own, key=lambda x: -x[1])[:n]


async def fill_and_measure(c: SkaldClient, base: str, tmp: Path, rows: int, have: int, rounds: int) -> None:
    """Skald alone at `rows` documents (OpenViking's ingest, ~0.5 s a document here, rules it out),
    loaded as a user loads a corpus: folders of files on disk, each added with one `resources.add`."""
    t = time.perf_counter()
    src = tmp / "filler"
    groups = range(have // FILL_GROUP, -(-rows // FILL_GROUP))
    for g in groups:
        d = src / f"g{g:04d}"
        d.mkdir(parents=True)
        for i in range(max(have, g * FILL_GROUP), min(rows, (g + 1) * FILL_GROUP)):
            (d / f"filler-{i:06d}.md").write_text(document(i))
    sem = asyncio.Semaphore(4)

    async def add(g: int) -> None:
        async with sem:
            await c.call("resources.add", {"path": str(src / f"g{g:04d}"),
                                           "target_uri": f"viking://resources/filler/g{g:04d}"})

    await asyncio.gather(*(add(g) for g in groups))
    while True:
        stats = await c.stats()
        health = await c.health()
        if (stats.queues.get("work") or {}).get("messages", 0) == 0 and health.actors["retriever"]["lag"] == 0:
            break
        await asyncio.sleep(1.0)
    print(f"\nSkald filled to {rows} documents in {time.perf_counter() - t:.0f} s")
    # Settled: every queued job done (above) and every row in the HNSW graph. Until then the index
    # scores the rows that wait for the graph exactly and its builder holds both cores.
    t = time.perf_counter()
    while (await c.health()).actors["retriever"]["index"].get("graph_pending", 0):
        await asyncio.sleep(1.0)
    print(f"settled (queues empty, every row in the graph) {time.perf_counter() - t:.0f} s later")
    # And the replica's snapshot of what the fill wrote, which otherwise runs (seconds at this size,
    # both cores) beside the first measurements.
    t = time.perf_counter()
    while time.perf_counter() - t < 600:
        r = (await c.health()).actors["retriever"]
        if r.get("snapshot_seq", 0) >= r["applied_seq"]:
            print(f"snapshot written {time.perf_counter() - t:.0f} s later (took {r['snapshot_ms']:.0f} ms)")
            break
        await asyncio.sleep(1.0)
    await alone(c, base, rows, rounds)
    print("Floors (issue 19): own cost <= 2 ms find, <= 4 ms context at 100k rows.")


async def alone(c: SkaldClient, base: str, docs: int, rounds: int) -> None:
    """Skald's find and context with nothing else asked in between: the embedding round trip, then
    each path, back to back, every query different."""
    qs = [f"{q} alone" for q in queries(rounds * 3, docs, seed=29)]  # none asked before: no cache answers
    lat: dict[str, list[float]] = {}
    async with aiohttp.ClientSession() as embed:
        for r in range(rounds):
            q = qs[r * 3: r * 3 + 3]
            lat.setdefault("embedding round trip", []).append(await timed(embed_once(embed, base, q[0])))
            lat.setdefault("Skald find (NATS)", []).append(await timed(c.call("search.find", {
                "query": q[1], "limit": 10})))
            lat.setdefault("Skald context (NATS)", []).append(await timed(c.call("search.search", {
                "query": q[2], "mode": "context", "max_tokens": 1600})))
    rt = pct(lat["embedding round trip"], 0.5)
    for k, v in lat.items():
        own = "" if k.startswith("embedding") else f", own {pct(v, 0.5) - rt:.2f}"
        print(f"{k} at {docs} documents: p50 {pct(v, 0.5):.2f} ms, p95 {pct(v, 0.95):.2f}{own}")


if __name__ == "__main__":
    asyncio.run(main())
