"""Which shard of the index holds a row, and which shards a scope spans.

A row belongs to the shard of its account and the first two segments of its URI
(`viking://resources/<project>`, `viking://user/<name>`): a directory's rows, its children's and
a long document's sections stay together, so a scope below that depth is answered by one shard
and the descent never leaves it. A broader scope (`viking://resources`, every space) spans all
shards. The hash is CRC-32, stable across processes and Python versions, unlike `hash()`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

SCHEME = "viking://"


def shard_key(account: str, uri: str) -> str:
    """The part of a row's identity its shard is chosen by; a section's `#anchor` is left out."""
    path = uri[len(SCHEME):] if uri.startswith(SCHEME) else uri
    segs = [s for s in path.split("#", 1)[0].split("/") if s][:2]
    return f"{account}\x00{'/'.join(segs)}"


def shard_of(account: str, uri: str, shards: int) -> int:
    """The shard (0 .. shards-1) that holds the rows of `uri` in `account`."""
    if shards <= 1:
        return 0
    return zlib.crc32(shard_key(account, uri).encode()) % shards


def shards_for(account: str, prefixes: Iterable[str] | None, shards: int) -> list[int]:
    """The shards a search under `prefixes` must ask (None: the whole account, every shard). A
    prefix shallower than two segments may hold rows of any shard."""
    if shards <= 1:
        return [0]
    if prefixes is None:
        return list(range(shards))
    out: set[int] = set()
    for p in prefixes:
        path = p[len(SCHEME):] if p.startswith(SCHEME) else p
        if len([s for s in path.split("#", 1)[0].split("/") if s]) < 2:
            return list(range(shards))
        out.add(shard_of(account, p, shards))
    return sorted(out) if out else list(range(shards))
