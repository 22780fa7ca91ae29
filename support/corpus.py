"""Seeding a worker with files and memories over the bus, the way a user would."""

from __future__ import annotations

from typing import Any

from skald.runtime.client.api import SkaldClient


async def write_files(c: SkaldClient, files: dict[str, str], **kw: Any) -> None:
    """`fs.write` each URI -> text (indexed before the reply unless `wait=False`)."""
    for uri, text in files.items():
        await c.call("fs.write", {"uri": uri, "content": text, **kw})


async def remember(c: SkaldClient, memories: list[tuple[str, str]], **kw: Any) -> list[str]:
    """`memories.write` each (category, content); their URIs in order."""
    return [(await c.call("memories.write", {"category": cat, "content": text, **kw}))["root_uri"]
            for cat, text in memories]
