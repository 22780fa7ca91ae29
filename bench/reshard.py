"""How long `skald store reshard` takes: section rows shaped as the indexer writes them (a float16
384-d vector, 60 words of text) published to a fresh index stream on an embedded nats-server, then
moved from one shard to three and from three to two. The baseline, in the same run, is one read of
every row through the same ordered consumer (what any reshard must at least do).

    .venv/bin/python bench/reshard.py [--rows 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec  # noqa: E402
import nats  # noqa: E402
import numpy as np  # noqa: E402
from nats.js import api  # noqa: E402

from bench.machine import describe  # noqa: E402
from skald.messages import subjects  # noqa: E402
from skald.messages.index import IndexChange, IndexRow  # noqa: E402
from skald.runtime.bus.natsserver import EmbeddedNats  # noqa: E402
from skald.runtime.bus.streams import ensure_streams, stream_name  # noqa: E402
from skald.runtime.host.reshard import reshard  # noqa: E402
from skald.store import vector_bytes  # noqa: E402
from skald.store.index.types import row_subject_token  # noqa: E402

PREFIX = "rs"


async def fill(js: Any, rows: int) -> None:
    rng, words = np.random.default_rng(1), random.Random(1)
    vocab = [f"w{i}" for i in range(5000)]
    pending = []
    for i in range(rows):
        uri = f"viking://resources/proj{i % 400}/doc{i // 40}.md#s{i % 40}"
        row = IndexRow(account="default", uri=uri, level=2, parent_uri=uri.split("#")[0], context_type="resource",
                       text=" ".join(words.choice(vocab) for _ in range(60)),
                       vector=vector_bytes.pack(rng.standard_normal(384).astype(np.float32)))
        pending.append(js.publish(subjects.index_row(PREFIX, row_subject_token("default", uri, 2)),
                                  msgspec.msgpack.encode(IndexChange(upsert=row))))
        if len(pending) >= 512:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)


async def read_all(js: Any) -> int:
    """The baseline: every row read once through an ordered consumer, nothing published."""
    count = int((await js.stream_info(stream_name(PREFIX, "index"))).state.messages)
    done = asyncio.Event()
    seen = 0

    async def cb(msg: Any) -> None:
        nonlocal seen
        seen += 1
        if seen == count:
            done.set()

    sub = await js.subscribe(f"{PREFIX}.index.row.>", stream=stream_name(PREFIX, "index"), cb=cb,
                             ordered_consumer=True, config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
                             pending_msgs_limit=1_000_000, pending_bytes_limit=2**31 - 1)
    await asyncio.wait_for(done.wait(), 600)
    await sub.unsubscribe()
    return seen


async def main(rows: int) -> None:
    print(describe())
    with tempfile.TemporaryDirectory(prefix="skald-bench-reshard-") as tmp:
        srv = EmbeddedNats(Path(tmp) / "nats", port=-1)
        url = srv.start()
        try:
            nc = await nats.connect(url)
            js = nc.jetstream(timeout=60.0)
            await ensure_streams(js, PREFIX)
            t = time.perf_counter()
            await fill(js, rows)
            print(f"{rows:,} rows published in {time.perf_counter() - t:.1f} s")
            t = time.perf_counter()
            n = await read_all(js)
            base = time.perf_counter() - t
            print(f"baseline, every row read once: {n:,} rows in {base:.1f} s ({n / base:,.0f} rows/s)")
            for shards in (3, 2):
                t = time.perf_counter()
                rep = await reshard(js, PREFIX, shards)
                took = time.perf_counter() - t
                print(f"reshard to {shards}: {rep.rows:,} rows read, {rep.moved:,} moved in {took:.1f} s "
                      f"({rep.rows / took:,.0f} rows/s; {took / base:.1f}x the baseline)")
            await nc.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    asyncio.run(main(ap.parse_args().rows))
