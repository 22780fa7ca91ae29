"""`sessions.list` of sessions no worker has loaded, as a new worker of a deployment answers it:
each session counted from what is stored (its meta, its live log, its archives). On the JetStream
store every one of those reads is a round trip; the sessions are counted several at a time
(`actors/session/handlers.py`, LIST_AT_ONCE). The baseline, in the same run and the same process,
is the same code counting one session at a time.

    .venv/bin/python bench/session_list.py [--sessions 100] [--store jetstream] [--repeat 5]

Each session gets two commits of four messages and one live message from a first worker, which
then stops; a second worker on an empty data directory (the JetStream store: nothing on its disk)
answers the listings. Prints the median of `--repeat` listings each way.
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

from skald.actors.session import handlers  # noqa: E402
from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from skald.runtime.client.api import SkaldClient  # noqa: E402
from skald.runtime.host.config import Config  # noqa: E402
from skald.runtime.host.worker import Worker  # noqa: E402


async def fill(c: SkaldClient, n: int) -> None:
    async def one(s: int) -> None:
        sid = f"s{s:05d}"
        for _ in range(2):
            for i in range(4):
                await c.call("sessions.add_message", {"session_id": sid, "role": "user",
                                                      "parts": [{"type": "text", "text": f"message {i} of {sid}"}]})
            await c.call("sessions.commit", {"session_id": sid, "wait": False})
        await c.call("sessions.add_message", {"session_id": sid, "role": "user",
                                              "parts": [{"type": "text", "text": "still live"}]})

    for first in range(0, n, 10):
        await asyncio.gather(*(one(s) for s in range(first, min(n, first + 10))))


async def listings(c: SkaldClient, repeat: int) -> tuple[float, int]:
    took = []
    for _ in range(repeat):
        t = time.perf_counter()
        got = await c.call("sessions.list", {"limit": 10_000})
        took.append((time.perf_counter() - t) * 1000)
    return statistics.median(took), len(got["sessions"])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--store", default="jetstream", choices=("jetstream", "local"))
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skald-bench-session-list-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    url = srv.start()
    env = {"SKALD_STORE": a.store}
    try:
        first = Worker(Config.from_env(env=env, data_dir=tmp / "a", nats_url=url, embedder="hash"), embedded=False)
        await first.start()
        async with await SkaldClient.connect(url, timeout_s=600.0) as c:
            await fill(c, a.sessions)
        await first.stop()
        # A new worker: on the JetStream store its disk is empty; on the local one it shares the data.
        data = tmp / ("b" if a.store == "jetstream" else "a")
        second = Worker(Config.from_env(env=env, data_dir=data, nats_url=url, embedder="hash"), embedded=False)
        await second.start()
        try:
            async with await SkaldClient.connect(url, timeout_s=600.0) as c:
                await listings(c, 1)  # connections and buckets opened
                at_once = handlers.LIST_AT_ONCE
                handlers.LIST_AT_ONCE = 1
                base, n = await listings(c, a.repeat)
                handlers.LIST_AT_ONCE = at_once
                now, n2 = await listings(c, a.repeat)
        finally:
            await second.stop()
        assert n == n2 == a.sessions, (n, n2)
        print(f"sessions.list of {a.sessions} sessions not loaded ({a.store} store), median of {a.repeat}: "
              f"one at a time {base:.0f} ms, {at_once} at a time {now:.0f} ms")
    finally:
        srv.stop()


if __name__ == "__main__":
    asyncio.run(main())
