"""Session throughput and latency over NATS, with 1 and 2 session workers.

    .venv/bin/python bench/sessions.py [--messages 4000] [--commits 200]
    .venv/bin/python bench/sessions.py --against 2404e0d   # and that commit's code, interleaved

Reports: durable add_message throughput across many sessions (every reply means fsync'd);
commit Phase 1 latency p50/p99 (the reply comes when the archive is durable and the Phase 2
job queued); sessions.context latency with 10 and 1,000 completed archives.
Workers are separate `skald worker` processes on one embedded nats-server; the client is this
process with many requests in flight.

On a noisy machine a figure alone says little: `--against REF` also runs git REF's code (its
tree exported, put first on the workers' PYTHONPATH) and measures one worker of each, alternating,
`--rounds` times, every round on a fresh data directory, then prints both medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.deploy import code_at, start_worker  # noqa: E402
from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def throughput(c: SkaldClient, n: int, sessions: int, inflight: int) -> float:
    sem = asyncio.Semaphore(inflight)

    async def one(i: int) -> None:
        async with sem:
            await c.call("sessions.add_message", {"session_id": f"tp{i % sessions}", "role": "user",
                                                  "parts": [{"type": "text", "text": f"message {i} " * 8}]})

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - t0)


async def phase1(c: SkaldClient, commits: int) -> list[float]:
    out = []
    for i in range(commits):
        sid = f"p1-{i}"
        for role in ("user", "assistant"):
            await c.call("sessions.add_message", {"session_id": sid, "role": role,
                                                  "parts": [{"type": "text", "text": "hello " * 20}]})
        t = time.perf_counter()
        r = await c.call("sessions.commit", {"session_id": sid})
        out.append((time.perf_counter() - t) * 1000)
        assert r["status"] == "accepted"
    return out


async def context_latency(c: SkaldClient, sid: str, archives: int, reads: int) -> list[float]:
    for i in range(archives):
        await c.call("sessions.add_message", {"session_id": sid, "role": "user",
                                              "parts": [{"type": "text", "text": f"turn {i}"}]})
        await c.call("sessions.commit", {"session_id": sid})
    for _ in range(600):  # until every Phase 2 has finished
        a = (await c.call("sessions.archives", {"session_id": sid}))["archives"]
        if len(a) == archives and all(x["state"] == "completed" for x in a):
            break
        await asyncio.sleep(0.2)
    await c.call("sessions.add_message", {"session_id": sid, "role": "user",
                                          "parts": [{"type": "text", "text": "live"}]})
    out = []
    for _ in range(reads):
        t = time.perf_counter()
        await c.call("sessions.context", {"session_id": sid})
        out.append((time.perf_counter() - t) * 1000)
    return out


async def measure(c: SkaldClient, messages: int, commits: int) -> tuple[float, list[float]]:
    """(add_message msgs/s across 200 sessions with 64 in flight, after a warm-up; Phase 1 latencies)."""
    await throughput(c, 200, 50, 32)
    return await throughput(c, messages, 200, 64), await phase1(c, commits)


async def one_worker(url: str, data: Path, prefix: str, code: Path | None, messages: int,
                     commits: int) -> tuple[float, list[float]]:
    """(add_message msgs/s, Phase 1 latencies) of one session worker running `code`."""
    p = start_worker(url, data, prefix, "session,archive", code=code)
    try:
        c = await SkaldClient.connect(url)
        c.prefix = prefix
        got = await measure(c, messages, commits)
        await c.close()
        return got
    finally:
        p.terminate()
        p.wait()


async def against(url: str, tmp: Path, ref: str, rounds: int, messages: int, commits: int) -> None:
    codes = {ref: code_at(ref, tmp), "this tree": None}
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in codes}
    for r in range(rounds):
        for name, code in codes.items():
            tag = f"r{r}{'a' if code else 'b'}"
            rate, p1 = await one_worker(url, tmp / f"data-{tag}", tag, code, messages, commits)
            got[name].append((rate, pct(p1, 50)))
            print(f"round {r + 1} {name:>12}: add_message {rate:7.0f} msgs/s, Phase 1 p50 {pct(p1, 50):.2f} ms",
                  flush=True)
    for name, xs in got.items():
        print(f"median of {rounds} {name:>12}: add_message {statistics.median(x[0] for x in xs):7.0f} msgs/s, "
              f"Phase 1 p50 {statistics.median(x[1] for x in xs):.2f} ms")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--against", help="git ref whose code is measured beside this tree's (one worker)")
    ap.add_argument("--rounds", type=int, default=3, help="with --against: alternating rounds of each")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-sessions-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    url = srv.start()
    try:
        if args.against:
            await against(url, tmp, args.against, args.rounds, args.messages, args.commits)
            return
        for n_workers in (1, 2):
            prefix = f"bench{n_workers}"
            data = tmp / f"data{n_workers}"
            procs = [start_worker(url, data, prefix, "session,archive") for _ in range(n_workers)]
            c = await SkaldClient.connect(url)
            c.prefix = prefix
            rate, p1 = await measure(c, args.messages, args.commits)
            print(f"{n_workers} session worker(s): add_message {rate:7.0f} msgs/s durable "
                  f"(200 sessions, 64 in flight); commit Phase 1 p50 {pct(p1, 50):.2f} ms p99 {pct(p1, 99):.2f} ms")
            if n_workers == 1:
                for archives in (10, 1000):
                    lat = await context_latency(c, f"ctx{archives}", archives, 200)
                    print(f"  sessions.context with {archives:4d} completed archives: p50 {pct(lat, 50):.2f} ms "
                          f"p99 {pct(lat, 99):.2f} ms")
            await c.close()
            for p in procs:
                p.terminate()
                p.wait()
        print("\nFloors (issue 4): add_message >= 2,000 msgs/s with one worker; Phase 1 p50 <= 10 ms; "
              "context read independent of the number of completed archives.")
    finally:
        srv.stop()


if __name__ == "__main__":
    asyncio.run(main())
