"""A move and a removal whose row keys pass one work-queue message go in parts through the real
work stream (the limit lowered here so that 30 files are enough), and the index ends as the tree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from skald.actors.indexer import jobs
from support.replaying import settle


async def indexed(c: Any, under: str) -> set[str]:
    r = await c.call("search.find", {"query": "", "target_uri": under, "level": 2, "limit": 500})
    return {h["uri"] for h in r["resources"]}


async def test_a_big_move_and_removal_in_parts(deploy: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "MAX_REMOVALS_BYTES", 600)  # about 8 row keys a part
    w, c = await deploy()
    for i in range(30):
        await c.write(f"viking://resources/big/f{i}.md", f"# File {i}\n\nLine {i} of the big folder.")
    assert len(await indexed(c, "viking://resources")) == 30
    indexer = w.host.actors["indexer"]
    before = indexer.jobs_done
    moved = await c.call("fs.mv", {"from_uri": "viking://resources/big", "to_uri": "viking://resources/moved"})
    assert moved["indexed"] and moved["removed"] >= 30
    await settle(c)
    assert indexer.jobs_done - before > 1  # the move's removals went in parts
    assert await indexed(c, "viking://resources") == {f"viking://resources/moved/f{i}.md" for i in range(30)}
    gone = await c.call("fs.rm", {"uri": "viking://resources/moved", "recursive": True})
    assert gone["indexed"]
    await settle(c)
    assert await indexed(c, "viking://resources") == set()
