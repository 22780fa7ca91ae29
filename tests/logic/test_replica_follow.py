"""The index replica's follower on a long tail (the in-memory bus hands it over as one batch): a
batch of many slow slices is progress, not a stall, so the watchdog leaves the follower alone."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from skald.actors.kit.memory_bus import MemoryBus
from skald.actors.retriever import replica as replica_mod
from skald.messages.index import IndexChange, IndexRow
from skald.store import vector_bytes
from skald.store.index.types import row_subject_token

DIM = 384


def _rows(prefix: str, n: int, rng: np.random.Generator) -> list[tuple[str, IndexChange]]:
    out = []
    for i in range(n):
        v = rng.standard_normal(DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        uri = f"viking://resources/{prefix}/r{i // 40}.md#s{i % 40}"
        row = IndexRow(account="a", uri=uri, level=2, parent_uri=uri.split("#")[0], context_type="resource",
                       model="m", kind="section", abstract=f"{prefix} {i}", text=f"{prefix} valve {i}",
                       vector=vector_bytes.pack(v))
        out.append((row_subject_token("a", uri, 2), IndexChange(upsert=row)))
    return out


async def test_a_long_tail_applied_slowly_keeps_its_follower(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bus = MemoryBus()
    await bus.publish_index(_rows("tail", 1500, np.random.default_rng(2)))
    monkeypatch.setattr(replica_mod, "STALL_S", 0.4)
    monkeypatch.setattr(replica_mod, "WATCH_EVERY_S", 0.05)
    rep = replica_mod.IndexReplica("m", DIM, bus, tmp_path, snapshot_interval_s=3600)
    real = rep.index.upsert_many

    def slow(rows, defer_graph=False):  # type: ignore[no-untyped-def]
        time.sleep(0.15)  # a slice of 256 rows on a loaded machine: six of them outlast STALL_S
        return real(rows, defer_graph=defer_graph)

    monkeypatch.setattr(rep.index, "upsert_many", slow)
    await rep.start()
    try:
        for _ in range(300):
            if rep.index.applied_seq >= 1500:
                break
            await asyncio.sleep(0.05)
        assert rep.index.applied_seq == 1500 and len(rep.index) == 1500
        assert rep.restarts == 0
    finally:
        await rep.stop()


async def test_with_a_writer_thread_applies_never_wait_behind_the_graphs_builder(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With the keyword take-up (writes on a thread of their own) the graph's builder has its own
    thread too: here its first batch waits until a later write is applied, which on a shared
    thread would never come."""
    import threading

    bus = MemoryBus()
    rng = np.random.default_rng(3)
    await bus.publish_index(_rows("first", 600, rng))  # a long tail: its rows wait for the builder
    rep = replica_mod.IndexReplica("m", DIM, bus, tmp_path, snapshot_interval_s=3600, maps_keywords=True)
    later_applied = threading.Event()
    waited: list[bool] = []
    build, upsert = rep.index.build_graph, rep.index.upsert_many

    def blocked_build(*args):  # type: ignore[no-untyped-def]
        if not waited:
            waited.append(later_applied.wait(20))
        return build(*args)

    def upsert_noting(rows, defer_graph=False):  # type: ignore[no-untyped-def]
        n = upsert(rows, defer_graph=defer_graph)
        if any(r.uri.startswith("viking://resources/later/") for r, _ in rows):
            later_applied.set()
        return n

    monkeypatch.setattr(rep.index, "build_graph", blocked_build)
    monkeypatch.setattr(rep.index, "upsert_many", upsert_noting)
    await rep.start()
    try:
        for _ in range(400):
            if waited or rep.index.applied_seq >= 600:
                break
            await asyncio.sleep(0.05)
        await bus.publish_index(_rows("later", 3, rng))
        for _ in range(600):
            if waited and rep.index.applied_seq >= 603 and not rep.index.pending_graph:
                break
            await asyncio.sleep(0.05)
        assert waited == [True]  # the later rows were applied while the builder held its batch
        assert rep.index.applied_seq == 603 and not rep.index.pending_graph
    finally:
        later_applied.set()
        await rep.stop()
