"""This worker's replica of the vector index: claimed on disk, built from a snapshot plus the
index log's tail, kept following the log, snapshotted now and then.

Every retriever worker holds one. Writers never wait for it: a caller that wants to read its own
write sends the index sequence its write was acknowledged with, and `catch_up` waits until the
replica has applied that far, or answers UNAVAILABLE (another replica, or a moment later, may
have it): never stale rows after a long wait.

The replica also asks the stream for its last sequence every second, so its lag is what the
stream has and it has not (not only what it received), and a follower that stops delivering while
the stream is ahead (its server died, its consumer was lost in a leader change) is recreated.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from skald.actors.kit import heapfree
from skald.actors.kit.ports import IndexLog
from skald.actors.kit.request import Ctx
from skald.actors.retriever import candidates
from skald.messages.errors import Unavailable
from skald.messages.index import IndexChange, IndexRow
from skald.store import vector_bytes
from skald.store.index import VectorIndex

log = logging.getLogger("skald.retriever")
APPLY_CHUNK = 256  # rows applied per slice; a longer tail is a catch-up (the HNSW graph follows behind)
MAX_SLOTS = 64  # replicas one host may hold side by side
WATCH_EVERY_S = 1.0  # how often the stream's last sequence is asked for
STALL_S = 3.0  # behind the stream with nothing applied for this long: the follower is recreated
SNAPSHOT_SHARE = 0.02  # the most of a replica's time its snapshots may take
TRIM_AFTER_ROWS = 10_000  # a graph backlog this long taken in: free heap pages handed back
# Threads the graph's background builder inserts with: a core is left for the searches and the
# ingest that go on meanwhile (searches over the rows still waiting are cheap: a shortlist).
BUILD_THREADS = max(1, len(os.sched_getaffinity(0)) - 1)
# With nothing applied for IDLE_S (an ingest over, the graph still behind it), every core: on two
# cores the 8-bit graph's catch-up after a million rows took 400 s on one.
IDLE_THREADS = len(os.sched_getaffinity(0))
IDLE_S = 1.0
SAVE_S_PER_ROW = 30e-6  # a snapshot's save, measured at a million rows (24-28 s)
RYW_WAIT_S = 3.0  # longest wait for a caller's own write before answering UNAVAILABLE


class IndexReplica:
    """This worker's copy of the index: restored from its snapshot, following the index log, snapshotted now and
    then."""

    def __init__(self, model: str, dim: int, bus: IndexLog, state_dir: Path, snapshot_interval_s: float = 30.0,
                 maps_keywords: bool = False, graph: str = "hnsw") -> None:
        self.model = model
        self.dim = dim
        self.bus = bus
        self.state_dir = Path(state_dir)
        self.snapshot_interval_s = snapshot_interval_s
        self.graph = graph  # the vector graph's kind (`store/index/rows.py` GRAPH_KINDS)
        self.maps_keywords = maps_keywords  # each snapshot's keyword index taken up (`store/index/adopt.py`)
        # With the take-up, every write to the index runs on one thread of its own. glibc gives
        # that thread its own arena, so the keyword index an ingest builds (then drops for the
        # snapshot's) is allocated apart from the searches, which run on the event loop: dropped
        # from the loop thread's arena, it left that arena in holes that made every search's
        # allocations slower (find +0.2-0.4 ms, context +0.4-0.6 ms at 315k rows). The cost:
        # applies contend with the loop for the GIL (a long catch-up a third to a half slower),
        # and the two arenas hold more until the first take-up (docs/design/scale.md).
        self._writer = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="index-writer")
                        if maps_keywords else None)
        # The graph's builder beside it, on a thread of its own: on the writer's, every insert of
        # 2,048 rows (most of a second at a million rows) held the applies back, and the graph's
        # time was added to the ingest's (1,050,100 rows from empty in 1,018 s on the 8-bit graph).
        # The graph's own memory is allocated by the library, apart from the keyword index.
        self._grapher = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="index-graph")
                         if maps_keywords else None)
        (self.state_dir / "index").mkdir(parents=True, exist_ok=True)
        # Leaf texts in a file there.
        self.index = VectorIndex(dim, model, text_dir=self.state_dir / "index", graph=graph)
        self.head_seq = 0
        self.replica_dir: Path | None = None
        self._applied = asyncio.Condition()
        self._tasks: list[asyncio.Task[Any]] = []
        self._builder: asyncio.Task[None] | None = None
        self._lock_fd: Any = None
        self._dirty = False
        self.snapshot_seq, self.snapshot_ms = 0, 0.0  # the last snapshot's: what it holds, what it took
        self._hash, self._hash_at = "", -1
        self._follower: asyncio.Task[None] | None = None
        self._progress_at = time.monotonic()  # last time rows were applied (or the lag was zero)
        self._applied_at = time.monotonic()  # last time rows were applied
        self._started: tuple[float, int] | None = None  # when a start behind the stream began, and how far behind
        self._fresh_at = time.monotonic()  # last time the replica had everything the stream had
        self.restarts = 0
        # A sharded index: this replica follows one shard's rows, while the stream's sequence counts
        # every shard's; `_covered` is the sequence up to which every row of this shard is applied.
        self.sharded = bus.index_shards > 1
        self._covered = 0
        self._told: set[str] = set()  # other embedders whose rows were skipped, said once each

    async def on_writer(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` off the event loop: on the index's writer thread when it has one."""
        if self._writer is None:
            return await asyncio.to_thread(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._writer, functools.partial(fn, *args))

    def _claim_dir(self) -> Path:
        """Each replica on a host keeps its own snapshot: take the first slot nobody holds. A shard's
        replicas keep theirs apart, so a worker started for another shard never loads the wrong rows."""
        base = self.state_dir / "index"
        if self.sharded:
            base = base / f"shard-{self.bus.index_shard}-of-{self.bus.index_shards}"
        base.mkdir(parents=True, exist_ok=True)
        for i in range(MAX_SLOTS):
            fd = open(base / f"replica-{i}.lock", "a+")  # noqa: SIM115 - held for the life of the process
            try:
                fcntl.flock(fd.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fd.close()
                continue
            self._lock_fd = fd
            return base / f"replica-{i}"
        raise RuntimeError("no free index replica slot")

    async def start(self) -> None:
        self.replica_dir = self._claim_dir()
        snap = await self.on_writer(VectorIndex.load, self.replica_dir, self.dim, self.model, None, self.graph)
        last = await self.bus.index_last_seq()
        if snap is not None and snap.applied_seq <= last:
            self.index = snap
            await asyncio.to_thread(heapfree.give_back)  # what decoding the snapshot left free
            self._tasks.append(asyncio.create_task(asyncio.to_thread(self._warm, snap), name="index-warm"))
        elif snap is not None:
            log.warning("snapshot is ahead of the index stream (stream reset?): rebuilding")
        behind = last - self.index.applied_seq
        if behind:  # what a start waits on, said as it starts (a rebuild of many rows takes seconds)
            log.info("index replica %s: %s, %d index changes to apply from the stream",
                     self.replica_dir.name, f"from its snapshot at seq {self.index.applied_seq}"
                     if self.index.applied_seq else "no snapshot, rebuilding", behind)
            self._started = (time.monotonic(), behind)
        self.head_seq = (await self.bus.index_next_seq(self.index.applied_seq) or self.index.applied_seq) \
            if self.sharded else last
        self._follower = asyncio.create_task(self._follow(), name="index-follow")
        self._tasks.append(asyncio.create_task(self._snapshots(), name="index-snapshots"))
        self._tasks.append(asyncio.create_task(self._watch(), name="index-watch"))

    def stop_grace_s(self) -> float:
        """How long stopping may take: the snapshot a stop saves (a million rows take 24-28 s)
        with room to spare, from the last save's time or, before any, SAVE_S_PER_ROW a row."""
        if not self._dirty or self.replica_dir is None:
            return 0.0
        rows = self.index.stats().get("rows", 0)
        return 1.5 * (self.snapshot_ms / 1000 if self.snapshot_ms else rows * SAVE_S_PER_ROW)

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._follower] if self._follower else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._dirty and self.replica_dir is not None:
            log.info("index replica: saving its snapshot before stopping (%d rows; the last save took %.1fs)",
                     self.index.stats().get("rows", 0), self.snapshot_ms / 1000)
            await self.on_writer(self.index.save, self.replica_dir)
        for pool in (self._writer, self._grapher):
            if pool is not None:
                pool.shutdown(wait=False)

    async def _follow(self) -> None:
        async for batch in self.bus.follow_index(self.index.applied_seq + 1):
            self._applied_at = time.monotonic()
            bulk = len(batch) >= APPLY_CHUNK  # a long tail: catching up; the graph follows behind
            for i in range(0, len(batch), APPLY_CHUNK):
                chunk = batch[i : i + APPLY_CHUNK]
                if bulk and self._writer is None:
                    # Catching up is pure CPU: applied on the loop in short slices (no GIL
                    # ping-pong with a thread), yielding between them so requests still run.
                    self.apply(chunk, bulk)
                    self._progress_at = self._applied_at = time.monotonic()  # a slice applied: the follower is alive
                    await asyncio.sleep(0)
                else:
                    await self.on_writer(self.apply, chunk, bulk)
                    self._progress_at = self._applied_at = time.monotonic()
            if batch:
                self.head_seq = max(self.head_seq, batch[-1][0])
                # Progress counts per slice, not per batch: a batch of 4,096 rows applied beside a
                # busy ingest can take longer than STALL_S, and the follower was recreated mid-batch
                # (its delivered rows sent again) as if it had stopped.
                self._progress_at = time.monotonic()
                if self._started is not None and self.index.applied_seq >= self.head_seq:
                    t0, behind = self._started
                    log.info("index replica caught up: %d changes applied in %.1fs", behind, time.monotonic() - t0)
                    self._started = None
            async with self._applied:
                self._applied.notify_all()
            if self.index.pending_graph and (self._builder is None or self._builder.done()):
                self._builder = asyncio.create_task(self._build_graph(), name="index-graph")

    async def _watch(self) -> None:
        """The stream's last sequence, every second: real lag, staleness, and a stalled follower
        recreated from what was applied."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            try:
                # Sharded: the first change of this shard not applied yet (0: none), since the
                # stream's last sequence may be another shard's and never arrive here.
                last = await (self.bus.index_next_seq(self.index.applied_seq) if self.sharded
                              else self.bus.index_last_seq())
            except Exception as e:  # noqa: BLE001 - the stream is electing a leader: ask again next time
                log.debug("index stream not answering (%s)", type(e).__name__)
                continue
            self.head_seq = max(self.head_seq, last)
            now = time.monotonic()
            if self.index.applied_seq >= self.head_seq:
                self._fresh_at = self._progress_at = now
                continue
            if now - self._progress_at > STALL_S:
                self.restart_follower(f"{self.head_seq - self.index.applied_seq} rows behind and none applied "
                                      f"for {now - self._progress_at:.1f}s")

    def restart_follower(self, why: str) -> None:
        log.warning("index follower recreated from seq %d: %s", self.index.applied_seq + 1, why)
        if self._follower is not None:
            self._follower.cancel()
        self._follower = asyncio.create_task(self._follow(), name="index-follow")
        self._progress_at = time.monotonic()
        self.restarts += 1

    async def _build_graph(self) -> None:
        """Deferred rows join the HNSW graph in chunks; searches stay exact until they have. A long
        backlog taken in leaves much of the heap free: it goes back to the system."""
        taken = self.index.pending_graph
        while True:
            while left := await self._graph_step():
                taken += 2048 if left >= 2048 else 0  # rows that came while it worked
                await asyncio.sleep(0)
            if taken < TRIM_AFTER_ROWS:
                return
            # Tidied up once the stream is quiet, not at every gap in an ingest (the builder, on a
            # thread of its own, now catches up in them): the trim holds each of the heap's arenas
            # while it walks it, the champion lists take the writer, and the next rows of the
            # ingest would stale both again.
            if time.monotonic() - self._applied_at >= IDLE_S and not self.index.pending_graph:
                break
            await asyncio.sleep(IDLE_S)
        await asyncio.to_thread(heapfree.give_back)
        await self.on_writer(self.index.warm_keywords)  # an ingest this long staled them

    async def _graph_step(self) -> int:
        """One batch of waiting rows into the graph, off the event loop; how many still wait."""
        idle = time.monotonic() - self._applied_at >= IDLE_S and self.index.applied_seq >= self.head_seq
        step = functools.partial(self.index.build_graph, 2048, IDLE_THREADS if idle else BUILD_THREADS)
        if self._grapher is None:
            return await asyncio.to_thread(step)
        return await asyncio.get_running_loop().run_in_executor(self._grapher, step)

    @staticmethod
    def _warm(snap: VectorIndex) -> None:
        """What a loaded snapshot's first searches would otherwise work out: how each row is
        served, and the frequent terms' champion lists."""
        candidates.warm(snap.live_rows())
        t0 = time.monotonic()
        terms = snap.warm_keywords()
        log.info("keyword champion lists of %d frequent terms chosen in %.1fs", terms, time.monotonic() - t0)

    def apply(self, batch: list[tuple[int, IndexChange]], bulk: bool = False) -> None:
        """Apply changes in stream order; rows of another model or dimension are skipped."""
        ups: list[tuple[IndexRow, np.ndarray]] = []

        def flush() -> None:
            if ups:
                self.index.upsert_many(ups, defer_graph=bulk)
                held = self.index.held  # the index keeps its own copy of each row
                candidates.warm(held(r.account, r.uri, r.level) for r, _ in ups)
                ups.clear()

        for _, ch in batch:
            if ch.upsert is not None:
                row = ch.upsert
                vec = vector_bytes.unpack(row.vector)
                if row.model == self.model and vec.shape == (self.index.dim,):
                    ups.append((row, vec))
                else:
                    flush()  # in stream order: a later write of the key by this embedder clears it
                    self._foreign(row)
            elif ch.delete is not None:
                flush()
                d = ch.delete
                self.index.delete(d.account, d.uri, d.level)
        flush()
        # Only now: a snapshot (another thread) or a read-your-writes check that saw a sequence
        # whose rows still waited in `ups` would skip them for good (a snapshot's tail starts past
        # it). A snapshot of part of the batch with the older sequence is replayed harmlessly.
        if batch:
            self.index.applied_seq = max(self.index.applied_seq, batch[-1][0])
        self._dirty = True

    def _foreign(self, row: IndexRow) -> None:
        """A row another embedder wrote cannot be compared with this one's queries: skipped, and
        said once per model, since an embeddings server moved to another address counts as
        another model and would otherwise leave the index silently empty."""
        model = row.model
        self.index.note_foreign(row.account, row.uri, row.level, model)
        if model not in self._told:
            self._told.add(model)
            log.warning("index rows embedded by %r are skipped: this replica embeds with %r. Point the "
                        "embedder back at that model, or embed them again with this one (`skald reindex viking://`, "
                        "content.reindex)", model, self.model)

    async def _snapshots(self) -> None:
        """A snapshot when rows changed, at most every `snapshot_interval_s`, and never more than
        SNAPSHOT_SHARE of the time: a save costs time in proportion to the index (a 30k-row index
        takes about a second), and a fixed interval let snapshots eat a growing share of a
        replica's CPU and stall its searches more often as the index grew."""
        took = 0.0
        while True:
            await asyncio.sleep(max(self.snapshot_interval_s, took / SNAPSHOT_SHARE))
            if self._dirty and self.replica_dir is not None:
                self._dirty = False
                t0 = time.monotonic()
                # With maps_keywords the snapshot's keyword index, mapped, replaces the one built
                # in memory, whose heap then goes back to the system. A keyword index read from a
                # snapshot (a cold start's) takes up each new one too: it maps the file this save
                # deletes, whose blocks (0.69 GB at a million rows) stayed allocated while mapped.
                adopt = self.maps_keywords or self.index.keywords_mapped()
                self.snapshot_seq = await self.on_writer(self.index.save, self.replica_dir, adopt)
                if adopt:
                    await asyncio.to_thread(heapfree.give_back)
                took = time.monotonic() - t0
                self.snapshot_ms = round(took * 1000, 1)

    async def catch_up(self, ctx: Ctx) -> bool:
        """Read-your-writes: wait until the caller's last write is applied; UNAVAILABLE (retry,
        perhaps on another replica) rather than stale rows when it does not come in time."""
        if ctx.index_seq <= max(self.index.applied_seq, self._covered):
            return True
        wait_s = max(0.0, min(RYW_WAIT_S, ctx.remaining() / 2))
        if self.sharded:
            return await self._shard_barrier(ctx.index_seq, time.monotonic() + wait_s)
        async with self._applied:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._applied.wait_for(lambda: self.index.applied_seq >= ctx.index_seq),
                                       wait_s)
        if self.index.applied_seq >= ctx.index_seq:
            return True
        raise Unavailable("this index replica has not applied your last write yet; retry",
                          {"index_seq": ctx.index_seq, "applied_seq": self.index.applied_seq,
                           "lag": self.lag(), "retry_after_ms": 200})

    async def _shard_barrier(self, seq: int, until: float) -> bool:
        """Read-your-writes on one shard: the caller's write may be another shard's, at a sequence
        this replica never receives. Every change of this shard up to `seq` is applied when the
        stream holds none after what was applied, or its first is past `seq` (the stream stored
        everything up to `seq` before the caller was told it)."""
        while True:
            applied = self.index.applied_seq
            nxt = await self.bus.index_next_seq(applied)
            if nxt == 0 or nxt > seq:
                self._covered = max(self._covered, nxt - 1 if nxt else seq)
                return True
            self.head_seq = max(self.head_seq, nxt)
            left = until - time.monotonic()
            if left > 0:
                async with self._applied:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._applied.wait_for(lambda n=nxt: self.index.applied_seq >= n), left)
            if self.index.applied_seq < nxt:
                raise Unavailable("this index replica has not applied your last write yet; retry",
                                  {"index_seq": seq, "applied_seq": self.index.applied_seq, "lag": self.lag(),
                                   "retry_after_ms": 200})

    def lag(self) -> int:
        return max(0, self.head_seq - self.index.applied_seq)

    def health(self) -> dict[str, Any]:
        applied = self.index.applied_seq
        if self._hash_at != applied:  # replicas holding the same rows report the same hash
            self._hash, self._hash_at = self.index.content_hash(), applied
        lag = self.lag()
        stale = 0.0 if lag == 0 else time.monotonic() - self._fresh_at
        return {"status": "stale" if stale > STALL_S else "ok", "index": self.index.stats(),
                "replica": str(self.replica_dir or ""), "lag": lag, "applied_seq": applied,
                "stream_seq": self.head_seq, "stale_s": round(stale, 3), "follower_restarts": self.restarts,
                "content_hash": self._hash, "embedder": self.model,
                "snapshot_seq": self.snapshot_seq, "snapshot_ms": self.snapshot_ms,
                "rows_other_model": len(self.index.foreign),
                **({"shard": self.bus.index_shard, "shards": self.bus.index_shards} if self.sharded else {})}
