"""Helpers for tests that rebuild a deployment (replay, snapshots) and compare it with the original."""

from __future__ import annotations

import asyncio
from pathlib import Path

from skald.runtime.client import SkaldClient


async def settle(c: SkaldClient) -> None:
    """Until the work queue is empty (memory indexing after Phase 2 runs in the background)."""
    quiet = 0
    for _ in range(300):
        st = await c.stats()
        quiet = quiet + 1 if (st.queues.get("work") or {}).get("messages", 1) == 0 and \
            st.index.get("lag", 1) == 0 else 0
        if quiet >= 3:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the work queue did not empty")


def tree_bytes(data_dir: Path) -> dict[str, bytes]:
    """Every file of the tree (not the worker's own state, the bus's store or lock files)."""
    out = {}
    for p in sorted(data_dir.rglob("*")):
        rel = p.relative_to(data_dir)
        # `.index.json` is the indexer's change detector: it holds each file's mtime, not content.
        if p.is_file() and rel.parts[0] not in (".skald", "nats") and not p.name.endswith(".lock") \
                and p.name != ".index.json":
            out[str(rel)] = p.read_bytes()
    return out
