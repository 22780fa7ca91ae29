"""The Tree port in a JetStream key-value bucket, so the tree lives in the cluster rather than on one
host's disk (docs/design/storage.md). Not yet selectable by `--store`: this is the port's first
many-host implementation, held to the same contract test as the local one.

Keys: a tree key's segments each escaped to the characters KV keys allow (`[A-Za-z0-9_-]` kept,
every other byte of its UTF-8 as `=XX`) and joined with `.`, under `n.`; so a directory's subtree is
the wildcard `n.<its tokens>.>`. A directory made empty on purpose (`write_dir`) carries the marker
token `=`; one being written carries `=p` until it is whole, and is invisible meanwhile (a crash
leaves it invisible, and a later `write_dir` of the same key takes its place).

Values: a file's bytes behind a one-byte tag, `F` and the bytes themselves, or, for a file past what
one message may carry, `O` and the name of an object in the bucket's object store (chunked, with a
SHA-256 digest, by JetStream); the object is written before the key points at it.

What JetStream gives this port: `create` is KV create (exactly one of two racing writers wins),
`append` is compare-and-set on the revision read, and every write is acknowledged by the stream
(replicated at the bucket's replicas) before it returns. Not yet: `move` of a directory is a copy
then a delete, not atomic, and an object a crash left unreferenced is not swept (the JetStream
issue's next steps).

The port's methods block, as the local tree's do; this one runs its own connection on its own event
loop thread, so callers (already off their event loop) simply wait on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from skald.store.treeport import Entry, check_key, parent

T = TypeVar("T")
_PLAIN = re.compile(r"[A-Za-z0-9_-]")
ROOT = "n"
DIR_MARK = "="  # a directory that exists on its own (made by write_dir)
PENDING_MARK = "=p"  # a directory write_dir has not finished
CAS_TRIES = 50
INLINE, OBJECT = b"F", b"O"
HEADROOM = 4096  # bytes of a message that are not the value (subject, headers)


def token(segment: str) -> str:
    """One path segment as a KV key token."""
    return "".join(c if _PLAIN.fullmatch(c) else "".join(f"={b:02X}" for b in c.encode()) for c in segment)


def segment(tok: str) -> str:
    """A KV key token back to its path segment."""
    out, i = bytearray(), 0
    while i < len(tok):
        if tok[i] == "=":
            out.append(int(tok[i + 1 : i + 3], 16))
            i += 3
        else:
            out += tok[i].encode()
            i += 1
    return out.decode()


def kv_key(key: str) -> str:
    return ".".join([ROOT, *(token(s) for s in check_key(key).split("/"))])


class JetStreamTree:
    """`Tree` in a KV bucket of a NATS deployment."""

    def __init__(self, servers: list[str], bucket: str, *, replicas: int = 1, timeout_s: float = 10.0,
                 connect: dict[str, Any] | None = None) -> None:
        self.timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="skald-tree", daemon=True)
        self._thread.start()
        self._nc: Any = None
        self._objects: Any = None
        self._kv: Any = self._run(self._open(servers, bucket, replicas, connect or {}))

    async def _open(self, servers: list[str], bucket: str, replicas: int, options: dict[str, Any]) -> Any:
        self._nc = await nats.connect(servers=servers, **options)
        js = self._nc.jetstream(timeout=self.timeout_s)
        try:
            self._objects = await js.object_store(f"{bucket}_big")
        except Exception:  # noqa: BLE001 - absent: create it (idempotent)
            self._objects = await js.create_object_store(bucket=f"{bucket}_big", replicas=replicas)
        try:
            return await js.key_value(bucket)
        except Exception:  # noqa: BLE001 - absent (or not yet visible): create it, which is idempotent
            return await js.create_key_value(bucket=bucket, history=1, replicas=replicas)

    async def _value(self, data: bytes, key: str) -> bytes:
        """What the key holds for `data`: the bytes themselves, or a pointer to an object with them."""
        if len(data) + 1 + HEADROOM <= self._nc.max_payload:
            return INLINE + data
        name = f"{kv_key(key)}@{uuid.uuid4().hex}"  # a new object per version: readers see old or new
        await self._objects.put(name, data)
        return OBJECT + name.encode()

    async def _bytes(self, stored: bytes | None) -> bytes:
        """A file's bytes from what its key holds."""
        raw = bytes(stored or b"")
        if raw[:1] == OBJECT:
            return bytes((await self._objects.get(raw[1:].decode())).data or b"")
        return raw[1:]

    async def _size(self, stored: bytes | None) -> int:
        """A file's size from what its key holds, without fetching an object's chunks."""
        raw = bytes(stored or b"")
        if raw[:1] == OBJECT:
            return int((await self._objects.get_info(raw[1:].decode())).size or 0)
        return max(0, len(raw) - 1)

    async def _drop(self, stored: bytes | None) -> None:
        """The object a replaced or removed value pointed at, if any."""
        raw = bytes(stored or b"")
        if raw[:1] == OBJECT:
            with contextlib.suppress(Exception):
                await self._objects.delete(raw[1:].decode())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout_s * 3)

    def close(self) -> None:
        """Close the connection and stop the loop thread."""
        if self._nc is not None:
            self._run(self._nc.drain())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    # ----- what the bucket holds under a key ------------------------------------------------

    async def _get(self, key: str) -> Any:
        try:
            return await self._kv.get(kv_key(key))
        except KeyNotFoundError:  # a deleted key too (KeyDeletedError is one)
            return None

    async def _under(self, key: str | None) -> list[list[str]]:
        """The token lists (after the key's own) of every entry below `key` (None: the root)."""
        base = kv_key(key) if key else ROOT
        # A watch on the subtree's wildcard: the server filters (nats-py's `keys(filters=...)`
        # matches substrings of every key in the bucket instead).
        watcher = await self._kv.watch(f"{base}.>", ignore_deletes=True, meta_only=True)
        found: list[str] = []
        try:
            async for entry in watcher:
                if entry is None:  # the end of what the bucket held when the watch began
                    break
                found.append(entry.key)
        finally:
            await watcher.stop()
        depth = base.count(".") + 1
        return [k.split(".")[depth:] for k in found]

    @staticmethod
    def _visible(below: list[list[str]]) -> bool:
        """Whether entries below a key make it a directory a reader can see."""
        marks = {tuple(t) for t in below if t[-1] in (DIR_MARK, PENDING_MARK) and len(t) == 1}
        if ("=p",) in marks and ("=",) not in marks:
            return False  # write_dir not finished
        return bool(below)

    async def _is_dir(self, key: str) -> bool:
        return self._visible(await self._under(key))

    async def _check_parents(self, key: str) -> None:
        p = parent(key)
        while p:
            if await self._get(p) is not None:
                raise NotADirectoryError(p)
            p = parent(p)

    # ----- the port -------------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        return self._run(self._read(key))

    async def _read(self, key: str) -> bytes:
        e = await self._get(key)
        if e is None:
            raise IsADirectoryError(key) if await self._is_dir(key) else FileNotFoundError(key)
        return await self._bytes(e.value)

    def write(self, key: str, data: bytes, *, durable: bool = True) -> None:
        self._run(self._write(key, data))

    async def _write(self, key: str, data: bytes) -> None:
        if await self._is_dir(key):
            raise IsADirectoryError(key)
        await self._check_parents(key)
        old = await self._get(key)
        await self._kv.put(kv_key(key), await self._value(bytes(data), key))
        if old is not None:
            await self._drop(old.value)

    def create(self, key: str, data: bytes) -> bool:
        return self._run(self._create(key, data))

    async def _create(self, key: str, data: bytes) -> bool:
        if await self._is_dir(key):
            raise IsADirectoryError(key)
        await self._check_parents(key)
        value = await self._value(bytes(data), key)
        try:
            await self._kv.create(kv_key(key), value)
        except KeyWrongLastSequenceError:
            await self._drop(value)
            return False
        return True

    def append(self, key: str, data: bytes) -> None:
        self._run(self._append(key, data))

    async def _append(self, key: str, data: bytes) -> None:
        for _ in range(CAS_TRIES):
            e = await self._get(key)
            try:
                if e is None:
                    await self._create_or_raise(key, data)
                else:
                    value = await self._value(await self._bytes(e.value) + data, key)
                    try:
                        await self._kv.update(kv_key(key), value, last=e.revision)
                    except KeyWrongLastSequenceError:
                        await self._drop(value)
                        raise
                    await self._drop(e.value)
                return
            except KeyWrongLastSequenceError:
                continue  # another writer came first: read again
        raise TimeoutError(f"append to {key}: {CAS_TRIES} writers came first")

    async def _create_or_raise(self, key: str, data: bytes) -> None:
        if not await self._create(key, data):
            raise KeyWrongLastSequenceError()

    def mkdir(self, key: str) -> None:
        self._run(self._mkdir(key))

    async def _mkdir(self, key: str) -> None:
        if await self._get(key) is not None:
            raise FileExistsError(key)
        await self._check_parents(key)
        await self._kv.put(f"{kv_key(key)}.{DIR_MARK}", b"")

    def write_dir(self, key: str, files: dict[str, bytes]) -> None:
        self._run(self._write_dir(key, files))

    async def _write_dir(self, key: str, files: dict[str, bytes]) -> None:
        if await self._get(key) is not None or await self._is_dir(key):
            raise FileExistsError(key)
        await self._check_parents(key)
        await self._kv.put(f"{kv_key(key)}.{PENDING_MARK}", b"")
        for name, data in files.items():
            file_key = f"{key}/{check_key(name)}"
            await self._kv.put(kv_key(file_key), await self._value(bytes(data), file_key))
        await self._kv.put(f"{kv_key(key)}.{DIR_MARK}", b"")  # whole from here on
        await self._kv.delete(f"{kv_key(key)}.{PENDING_MARK}")

    def stat(self, key: str) -> Entry | None:
        return self._run(self._stat(key))

    async def _stat(self, key: str) -> Entry | None:
        name = key.rpartition("/")[2]
        e = await self._get(key)
        if e is not None:
            return Entry(name, False, await self._size(e.value), 0.0)
        return Entry(name, True) if await self._is_dir(key) else None

    def list(self, key: str) -> list[Entry]:
        return self._run(self._list(key))

    async def _list(self, key: str) -> list[Entry]:
        if await self._get(key) is not None:
            raise NotADirectoryError(key)
        below = await self._under(key)
        if not self._visible(below):
            raise FileNotFoundError(key)
        children: dict[str, list[list[str]]] = {}
        for toks in below:
            if toks[0] in (DIR_MARK, PENDING_MARK):
                continue
            children.setdefault(toks[0], []).append(toks[1:])
        out = []
        for tok, rest in sorted(children.items(), key=lambda kv: segment(kv[0])):
            name = segment(tok)
            files = [r for r in rest if not r]
            deeper = [r for r in rest if r]
            if files:
                e = await self._get(f"{key}/{name}")
                out.append(Entry(name, False, await self._size(e.value) if e is not None else 0, 0.0))
            elif self._visible(deeper):
                out.append(Entry(name, True))
        return out

    def remove(self, key: str, *, recursive: bool = False) -> bool:
        return self._run(self._remove(key, recursive))

    async def _remove(self, key: str, recursive: bool) -> bool:
        if (e := await self._get(key)) is not None:
            await self._kv.delete(kv_key(key))
            await self._drop(e.value)
            return True
        below = await self._under(key)
        if not below:
            return False
        if not recursive:
            raise IsADirectoryError(key)
        for toks in below:
            sub = ".".join([kv_key(key), *toks])
            with contextlib.suppress(KeyNotFoundError):
                old = await self._kv.get(sub)
                await self._kv.delete(sub)
                await self._drop(old.value)
        return True

    def move(self, src: str, dst: str) -> None:
        self._run(self._move(src, dst))

    async def _move(self, src: str, dst: str) -> None:
        if await self._get(dst) is not None or await self._is_dir(dst):
            raise FileExistsError(dst)
        await self._check_parents(dst)
        e = await self._get(src)
        if e is not None:  # the value moves as it is (an object pointer included)
            await self._kv.put(kv_key(dst), bytes(e.value or b""))
            await self._kv.delete(kv_key(src))
            return
        below = await self._under(src)
        if not below:
            raise FileNotFoundError(src)
        base_src, base_dst = kv_key(src), kv_key(dst)
        for toks in below:  # copy, then delete: not atomic yet (see the module's docstring)
            old = await self._kv.get(".".join([base_src, *toks]))
            await self._kv.put(".".join([base_dst, *toks]), bytes(old.value or b""))
        for toks in below:
            await self._kv.delete(".".join([base_src, *toks]))
