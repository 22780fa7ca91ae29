"""Helpers for tests that rebuild a deployment (replay, snapshots) and compare it with the original."""

from __future__ import annotations

from pathlib import Path

from skald.runtime.client.api import SkaldClient
from skald.runtime.replay import compaction, snapshots


async def settle(c: SkaldClient) -> None:
    """Until the work queue is empty (memory indexing after Phase 2 runs in the background)."""
    await compaction.settle(c, 30.0)


def tree_bytes(data_dir: Path) -> dict[str, bytes]:
    """Every file of the tree as a snapshot holds it, but `.index.json`: the indexer's change
    detector holds each file's mtime, not content."""
    out = {}
    for p in sorted(data_dir.rglob("*")):
        rel = p.relative_to(data_dir)
        if p.is_file() and snapshots.in_tree(rel) and p.name != ".index.json":
            out[str(rel)] = p.read_bytes()
    return out
