"""A JetStream tree key's value: a file's bytes behind a one-byte tag, `F` and the bytes
themselves, or, for a file past what one message may carry, `O` and the name of an object in the
account's object store (chunked, with a SHA-256 digest, by JetStream), with the size in a header.
The object is written before the key points at it; a new object per version, so a reader sees the
old file or the new one (`jetstream_tree.py` holds the keys)."""

from __future__ import annotations

import uuid

from skald.runtime.bus.tree_buckets import MTIME, SIZE, Bucket, Found, bounded
from skald.runtime.bus.tree_keys import kv_key
from skald.store import faults

INLINE, OBJECT = b"F", b"O"
HEADROOM = 4096  # bytes of a message that are not the value (subject, headers)


async def encode(b: Bucket, key: str, data: bytes, max_payload: int) -> tuple[bytes, dict[str, str] | None]:
    """What the key holds for `data`: the bytes themselves, or a pointer to an object with them."""
    if len(data) + 1 + HEADROOM <= max_payload:
        return INLINE + data, None
    name = f"{kv_key(key)}@{uuid.uuid4().hex}"
    await b.objects.put(name, data)
    faults.point("tree.object_written")  # the object stored, no key pointing at it yet
    return OBJECT + name.encode(), {SIZE: str(len(data))}


async def read(b: Bucket, found: Found) -> bytes:
    """The file's bytes."""
    if found.value[:1] == OBJECT:
        return bytes((await b.objects.get(found.value[1:].decode())).data or b"")
    return found.value[1:]


async def read_many(b: Bucket, kkeys: list[str]) -> list[bytes | None]:
    """Each key's file bytes (None: no file there), the keys read from the leader at once
    (`Bucket.get_many`), a file in the object store fetched on its own."""
    found = await b.get_many(kkeys)
    data = iter(await bounded([read(b, f) for f in found if f is not None]))
    return [None if f is None else next(data) for f in found]


def size(found: Found) -> int:
    """The file's size, without reading an object."""
    return int(found.headers[SIZE]) if SIZE in found.headers else max(0, len(found.value) - 1)


def kept(found: Found) -> dict[str, str]:
    """The headers a moved value keeps: its size, and its modification time."""
    return {MTIME: repr(found.mtime), **({SIZE: found.headers[SIZE]} if SIZE in found.headers else {})}


async def drop(b: Bucket, found: Found | None) -> None:
    """The object a replaced or removed value pointed at, if any."""
    if found is not None and found.value[:1] == OBJECT:
        try:
            await b.objects.delete(found.value[1:].decode())
        except Exception:  # noqa: BLE001 - already gone; an orphan costs disk, never correctness
            pass


async def pointers(b: Bucket, pattern: str) -> set[str]:
    """The objects the files of the keys matching `pattern` point at now (every key read, at once)."""
    found = await b.get_many(await b.keys(pattern))
    return {f.value[1:].decode() for f in found if f is not None and f.value[:1] == OBJECT}
