"""`skald replay compact`: roll a snapshot forward to the live deployment's settled head, then
(optionally) drop the events it covers from the stream.

The new snapshot is not copied from the live data directory, which keeps changing under a copy:
it is built by replay, in a scratch deployment of its own (embedded nats-server, temporary data
directory): the previous snapshot restored, the journal's tail applied with the logged model
answers, the result captured. Replay being exact, that is the live state at the cut, and the
live deployment is never paused. The cut is a sequence at which the work queue was empty, so every
background step of the writes before it (Phase 2, memory indexing) has finished and logged its
model answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import tempfile
import time
from pathlib import Path

from nats.aio.client import Client as NATS

from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.config import Config
from skald.runtime.host.worker import Worker
from skald.runtime.models import model_log
from skald.runtime.replay import journal as replay
from skald.runtime.replay import snapshots

log = logging.getLogger("skald.compact")
SCRATCH_PREFIX = "compact"


class CompactError(RuntimeError):
    """Why a compaction stopped (no settled cut, a scratch deployment that did not come up)."""


async def settled_cut(nc: NATS, prefix: str, timeout_s: float) -> int:
    """The events stream's last sequence, read at a moment the work queue was empty after it."""
    js = nc.jetstream(timeout=10.0)
    deadline = time.monotonic() + timeout_s
    while True:
        cut = (await js.stream_info(stream_name(prefix, "events"))).state.last_seq
        if (await js.stream_info(stream_name(prefix, "work"))).state.messages == 0:
            return int(cut)
        if time.monotonic() > deadline:
            raise CompactError(f"the work queue did not empty in {timeout_s:.0f} s; try again when it settles")
        await asyncio.sleep(0.5)


async def settle(c: SkaldClient, timeout_s: float) -> None:
    """Until a deployment's work queue is empty and its replica caught up, use counters included
    (three reads in a row)."""
    deadline, quiet = time.monotonic() + timeout_s, 0
    while quiet < 3:
        st = await c.stats()
        counters = (st.queues.get("usage") or {}).get("messages", 0)
        busy = ((st.queues.get("work") or {}).get("messages", 1) or st.index.get("lag", 1)
                or (st.index.get("usage") or {}).get("nodes", 0) < counters)
        quiet = 0 if busy else quiet + 1
        if quiet < 3 and time.monotonic() > deadline:
            raise CompactError(f"the deployment did not settle in {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


async def compact(nc: NATS, prefix: str, snap: Path, cfg: Config, *, purge: bool = False,
                  timeout_s: float = 600.0) -> snapshots.SnapshotMeta:
    """Roll `snap` (created when missing) forward to the live deployment's settled head; with
    `purge`, the events stream then keeps only what came after it. `cfg` is the deployment's
    configuration (the same embedder and model settings as its workers)."""
    js = nc.jetstream(timeout=10.0)
    events = stream_name(prefix, "events")
    prev = snapshots.load_meta(snap) if (snap / snapshots.META).exists() else None
    after = prev.events_seq if prev else 0
    state = (await js.stream_info(events)).state
    if state.messages and state.first_seq > after + 1:
        raise CompactError(f"the events stream starts at {state.first_seq} but the snapshot covers up to {after}: "
                           "events in between were dropped (retention shorter than the compaction interval?)")
    cut = await settled_cut(nc, prefix, timeout_s)
    tail = await replay.record(nc, prefix, after=after, upto=cut)
    answers = [*(snapshots.load_answers(snap) if prev else []),
               *replay.answers(tail)]
    tmp = Path(tempfile.mkdtemp(prefix="skald-compact-"))
    server = EmbeddedNats(tmp / "nats", port=-1)
    try:
        url = await asyncio.to_thread(server.start)
        data = tmp / "data"
        if prev:
            await asyncio.to_thread(snapshots.restore_tree, snap, data)
        scfg = dataclasses.replace(cfg, data_dir=data, nats_url=url, prefix=SCRATCH_PREFIX, metrics_port=0,
                                   events_max_age_s=0.0, keys_file="", root_key="", worker_secret="")
        worker = Worker(scfg, embedded=False)
        await worker.start()
        client = await SkaldClient.connect(url, prefix=SCRATCH_PREFIX)
        try:
            if prev:
                await snapshots.publish_state(client.nc, SCRATCH_PREFIX, snap)
            writes = await replay.apply(client.nc, SCRATCH_PREFIX, tail, timeout_s=timeout_s)
            await settle(client, timeout_s)
            meta = await snapshots.capture(client.nc, SCRATCH_PREFIX, data, snap, events_seq=cut, answers=answers)
        finally:
            await client.close()
            await worker.stop()
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("snapshot %s rolled forward from %d to %d (%d writes): %d files, %d rows, %d answers",
             snap, after, cut, writes, meta.files, meta.rows, meta.answers)
    if purge:
        await js.purge_stream(events, seq=cut + 1)  # keeps cut + 1 onwards
        # The live workers keep finding the answers they were given (the snapshot has them too).
        await model_log.publish_answers(nc, prefix, snapshots.load_answers(snap), f"kept-{cut}")
    return meta
