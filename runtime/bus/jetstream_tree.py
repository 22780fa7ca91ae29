"""The Tree port in JetStream, so the tree lives in the cluster rather than on one host's disk
(docs/design/storage.md): selected with `--store jetstream`.

Keys: a tree key's segments each escaped to the characters KV keys allow (`[A-Za-z0-9_-]` kept,
every other byte of its UTF-8 as `=XX`) and joined with `.`, under `n.`, in the bucket of the key's
account (`tree_buckets.py`: one bucket per account, placed by tags). A file is one key; a directory
is a marker key, `<its tokens>.=`, written before anything under it is visible through a listing, so a
directory's stat is one read, and its listing two subject lists (`<tokens>.*` for files,
`<tokens>.*.=` for subdirectories) however deep the tree below it is. `write_dir` writes the files,
then the marker: an archive is invisible until whole, and leftovers of a crashed attempt are purged by
the next one. Removing a directory is one purge of its subtree: it is gone at once.

Values (`tree_values.py`): a file's bytes behind a one-byte tag, `F` and the bytes themselves, or, for a file past what
one message may carry, `O` and the name of an object in the account's object store (chunked, with a
SHA-256 digest, by JetStream), with the size in a header; the object is written before the key
points at it. Every write is acknowledged by the stream (replicated at its replicas) before it
returns; every read and listing is answered by the stream's leader (direct gets are off, and no
listing goes through a consumer, which may sit on a replica still catching up), so a worker reads
what any worker wrote before it. `create` is a publish expecting no value; `append` a compare-and-set
on the revision read. A move is a copy, then the source purged, behind an intent key (`m.<destination>`)
that the same move asked again, or the next process to open the bucket, finishes from: a worker killed
between the two leaves one place, not two. An object a crash left unreferenced is deleted by
`skald store sweep` (`tree_sweep.py`).

The port's methods block, as the local tree's do; this one runs its own connection on its own event
loop thread, so callers (already off their event loop) simply wait on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats

from skald.runtime.bus import tree_listing, tree_moves, tree_sweep, tree_values
from skald.runtime.bus.streams import TRANSIENT
from skald.runtime.bus.tree_accounts import AccountBuckets
from skald.runtime.bus.tree_buckets import (
    SYSTEM,
    Bucket,
    Conflicted,
    Found,
    Tails,
    bounded,
)
from skald.runtime.bus.tree_keys import (
    ACCOUNTS,
    VIRTUAL,
    ancestors,
    kv_key,
    mark,
    moving,
    segment,
)
from skald.runtime.client.loop_thread import LoopClosed, LoopThread
from skald.store import faults
from skald.store.treeport import Entry, StoreUnavailable, check_key

T = TypeVar("T")
log = logging.getLogger("skald.bus")
CAS_TRIES = 50
TAIL_BYTES = 64 * 1024 * 1024  # files appended to, kept with their revision (`Tails`)


class JetStreamTree:
    """`Tree` in per-account JetStream buckets of a NATS deployment."""

    def __init__(self, servers: list[str], bucket: str, *, replicas: int = 1, timeout_s: float = 10.0,
                 connect: dict[str, Any] | None = None, placement: dict[str, list[str]] | None = None) -> None:
        self.base = bucket
        self.replicas = replicas
        self.timeout_s = timeout_s
        self.placement = placement or {}  # account -> placement tags; "*" for every other account
        self._noted_dirs: set[str] = set()  # directories `put_note` has made sure of
        self._tails = Tails(TAIL_BYTES)
        self._loop = LoopThread("skald-tree")
        self._nc: Any = None
        self._run(self._open(servers, connect or {}))

    async def _open(self, servers: list[str], options: dict[str, Any]) -> None:
        self._nc = await nats.connect(servers=servers, **options)
        self._js = self._nc.jetstream(timeout=self.timeout_s)
        self._accounts = AccountBuckets(self._js, self.base, self.replicas, self.placement)
        await self._bucket(SYSTEM)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result on the tree's loop; JetStream's transient failures raised as the
        port's `StoreUnavailable`, so callers tell "not now" from "not so" without knowing NATS."""
        try:
            return self._loop.run(coro, self.timeout_s * 6)
        except TRANSIENT as e:
            raise StoreUnavailable(f"the tree's JetStream is not answering ({type(e).__name__}: {e})") from e
        except LoopClosed as e:  # a call from another thread as the worker shuts down
            raise StoreUnavailable(f"the tree is {e}") from e

    def close(self) -> None:
        """Close the connection and stop the loop thread; calls still in flight end UNAVAILABLE."""
        if self._loop.closed:
            return
        if self._nc is not None:
            self._run(self._nc.drain())
        self._loop.close()

    # ----- buckets and values ---------------------------------------------------------------

    async def _bucket(self, account: str) -> Bucket:
        return await self._accounts.bucket(account)

    async def _prepare(self, b: Bucket, key: str) -> tuple[Found | None, Found | None, list[str]]:
        """Before a write at `key`: (its file, its directory marker, the ancestors lacking a
        marker); `NotADirectoryError` when a file stands where an ancestor would.

        Its parent's marker standing vouches for every ancestor: markers are made top-down before
        anything below them, a removal purges a subtree with its markers at once, and no key is a
        file while it is a directory (a write refuses one). So a write into an existing directory
        reads three keys, whatever its depth; the whole chain is read only when the parent is new."""
        above = ancestors(key)
        first = await bounded([b.get(kv_key(key)), b.get(mark(key)), *([b.get(mark(above[0]))] if above else [])])
        if not above or first[2] is not None:
            return first[0], first[1], []
        got = await bounded([*(b.get(kv_key(a)) for a in above), *(b.get(mark(a)) for a in above[1:])])
        files, marks = got[: len(above)], [None, *got[len(above):]]
        for a, f in zip(above, files, strict=True):
            if f is not None:
                raise NotADirectoryError(a)
        return first[0], first[1], [a for a, m in zip(above, marks, strict=True) if m is None]

    # ----- the port -------------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        return self._run(self._read(key))

    async def _read(self, key: str) -> bytes:
        b = await self._accounts.of(key)
        found = await b.get(kv_key(key))
        if found is None:
            raise IsADirectoryError(key) if await b.get(mark(key)) is not None else FileNotFoundError(key)
        return await tree_values.read(b, found)

    def read_many(self, keys: list[str]) -> list[bytes | None]:
        return self._run(self._read_many(keys))

    async def _read_many(self, keys: list[str]) -> list[bytes | None]:
        out: list[bytes | None] = [None] * len(keys)
        for b, at in await self._by_bucket(keys):  # each bucket's keys at once
            for i, value in zip(at, await tree_values.read_many(b, [kv_key(keys[i]) for i in at]), strict=True):
                out[i] = value
        return out

    async def _by_bucket(self, keys: list[str]) -> list[tuple[Bucket, list[int]]]:
        """The keys' places grouped by the bucket that holds them."""
        groups: dict[str, tuple[Bucket, list[int]]] = {}
        for i, key in enumerate(keys):
            b = await self._accounts.of(check_key(key))
            groups.setdefault(b.name, (b, []))[1].append(i)
        return list(groups.values())

    def write(self, key: str, data: bytes, *, durable: bool = True) -> bool:
        return self._run(self._write(key, bytes(data)))

    async def _write(self, key: str, data: bytes) -> bool:
        self._tails.drop(key)
        b = await self._accounts.of(key)
        old, is_dir, missing = await self._prepare(b, key)
        if is_dir is not None:
            raise IsADirectoryError(key)
        await tree_moves.mark_dirs(b, missing)
        value, headers = await tree_values.encode(b, key, data, self._nc.max_payload)
        await b.put(kv_key(key), value, headers=headers)
        await tree_values.drop(b, old)
        return old is not None

    def create(self, key: str, data: bytes) -> bool:
        return self._run(self._create_file(key, bytes(data)))

    async def _create_file(self, key: str, data: bytes) -> bool:
        b = await self._accounts.of(key)
        old, is_dir, missing = await self._prepare(b, key)
        if is_dir is not None:
            raise IsADirectoryError(key)
        if old is not None:
            return False
        await tree_moves.mark_dirs(b, missing)
        value, headers = await tree_values.encode(b, key, data, self._nc.max_payload)
        if await b.create(kv_key(key), value, headers):
            return True
        await tree_values.drop(b, Found(value, 0, 0.0, {}))
        return False

    def append(self, key: str, data: bytes) -> None:
        self._run(self._append(key, bytes(data)))

    def append_many(self, items: dict[str, bytes]) -> dict[str, BaseException]:
        """Several files appended to at once (a batch of session logs): the failures by key."""
        return self._run(self._append_many(items))

    async def _append_many(self, items: dict[str, bytes]) -> dict[str, BaseException]:
        async def one(key: str, data: bytes) -> BaseException | None:
            try:
                await self._append(key, data)
            except Exception as e:  # noqa: BLE001 - reported per key to its callers
                return e
            return None

        got = await bounded([one(k, d) for k, d in items.items()])
        return {k: e for k, e in zip(items, got, strict=True) if e is not None}

    async def _append(self, key: str, data: bytes) -> None:
        b = await self._accounts.of(key)
        cached = self._tails.get(key)
        if cached is not None and len(cached[1]) + len(data) + 1 + tree_values.HEADROOM <= self._nc.max_payload:
            whole = cached[1] + data
            try:
                self._tails.put(key, await b.put(kv_key(key), tree_values.INLINE + whole, last=cached[0]), whole)
                return
            except Conflicted:
                self._tails.drop(key)  # written by another worker since: read it again
        for _ in range(CAS_TRIES):
            found = await b.get(kv_key(key))
            if found is None:
                if await self._create_file(key, data):
                    return
                continue  # another writer created it first: append to theirs
            whole = await tree_values.read(b, found) + data
            value, headers = await tree_values.encode(b, key, whole, self._nc.max_payload)
            try:
                revision = await b.put(kv_key(key), value, headers=headers, last=found.revision)
            except Conflicted:
                await tree_values.drop(b, Found(value, 0, 0.0, {}))
                continue  # another writer came first: read again
            await tree_values.drop(b, found)
            if value[:1] == tree_values.INLINE:
                self._tails.put(key, revision, whole)
            return
        raise TimeoutError(f"append to {key}: {CAS_TRIES} writers came first")

    def mkdir(self, key: str) -> None:
        self._run(self._mkdir(key))

    async def _mkdir(self, key: str) -> None:
        if key in VIRTUAL:
            return
        b = await self._accounts.of(key)
        old, is_dir, missing = await self._prepare(b, key)
        if old is not None:
            raise FileExistsError(key)
        await tree_moves.mark_dirs(b, missing if is_dir is not None else [*missing, key])

    def write_dir(self, key: str, files: dict[str, bytes]) -> None:
        self._run(self._write_dir(key, {check_key(n): bytes(d) for n, d in files.items()}))

    async def _write_dir(self, key: str, files: dict[str, bytes]) -> None:
        b = await self._accounts.of(key)
        old, is_dir, missing = await self._prepare(b, key)
        if old is not None or is_dir is not None:
            raise FileExistsError(key)
        await b.delete(f"{kv_key(key)}.>")  # leftovers of an attempt that died before its marker
        values = await bounded([tree_values.encode(b, f"{key}/{n}", d, self._nc.max_payload) for n, d in files.items()])
        await bounded([b.put(kv_key(f"{key}/{n}"), v, headers=h) for n, (v, h) in zip(files, values, strict=True)])
        await tree_moves.mark_dirs(b, missing)
        await b.put(mark(key), b"")  # whole from here on

    def stat(self, key: str) -> Entry | None:
        return self._run(self._stat(key))

    async def _stat(self, key: str) -> Entry | None:
        if key in VIRTUAL:
            return Entry(key.rpartition("/")[2], True) if await self._list_virtual(key) else None
        b = await self._accounts.of(key)
        return tree_listing.entry(key, *await asyncio.gather(b.get(kv_key(key)), b.get(mark(key))))

    def stat_many(self, keys: list[str]) -> list[Entry | None]:
        return self._run(self._stat_many(keys))

    async def _stat_many(self, keys: list[str]) -> list[Entry | None]:
        """Each bucket's keys, and their directory markers, read from its leader at once."""
        if any(k in VIRTUAL for k in keys):  # the space roots are no keys: each stat'ed on its own
            return [await self._stat(k) for k in keys]
        out: list[Entry | None] = [None] * len(keys)
        for b, at in await self._by_bucket(keys):
            got = await b.get_many([k for i in at for k in (kv_key(keys[i]), mark(keys[i]))])
            for n, i in enumerate(at):
                out[i] = tree_listing.entry(keys[i], got[2 * n], got[2 * n + 1])
        return out

    def list(self, key: str, *, details: bool = True) -> list[Entry]:
        return self._run(self._list(key, details))

    async def _list(self, key: str, details: bool = True) -> list[Entry]:
        if key in VIRTUAL:
            found = await self._list_virtual(key)
            return found if details else [Entry(e.name, True) for e in found]
        b = await self._accounts.of(key)
        found, is_dir = await asyncio.gather(b.get(kv_key(key)), b.get(mark(key)))
        if found is not None:
            raise NotADirectoryError(key)
        if is_dir is None:
            raise FileNotFoundError(key)
        return await tree_listing.entries(b, key, details)

    async def _list_virtual(self, key: str) -> list[Entry]:
        """`accounts` or `uploads`: the accounts whose bucket holds that directory."""
        system = await self._bucket(SYSTEM)
        names = [segment(k.rsplit(".", 1)[1]) for k in await system.keys(f"{ACCOUNTS}.*")]
        stats = await bounded([self._stat(f"{key}/{n}") for n in names])
        return sorted((e for e in stats if e is not None and e.is_dir), key=lambda e: e.name)

    def remove(self, key: str, *, recursive: bool = False) -> bool:
        return self._run(self._remove(key, recursive))

    async def _remove(self, key: str, recursive: bool) -> bool:
        self._tails.drop(key, subtree=True)
        b = await self._accounts.of(key)
        found, is_dir = await asyncio.gather(b.get(kv_key(key)), b.get(mark(key)))
        if found is not None:
            await b.delete(kv_key(key))
            await tree_values.drop(b, found)
            return True
        if is_dir is None:
            return False
        if not recursive:
            raise IsADirectoryError(key)
        big = await tree_moves.pointed_at(b, key)
        await b.delete(f"{kv_key(key)}.>")  # the subtree, its marker included, gone at once
        await bounded([b.objects.delete(n) for n in big])
        return True

    def sweep(self, older_than_s: float = tree_sweep.DEFAULT_AGE_S) -> tree_sweep.SweepReport:
        """Every account's objects that no file points at, older than `older_than_s`, deleted
        (`tree_sweep.py`)."""
        return self._run(self._sweep(older_than_s))

    async def _sweep(self, older_than_s: float) -> tree_sweep.SweepReport:
        system = await self._bucket(SYSTEM)
        accounts = [segment(k.rsplit(".", 1)[1]) for k in await system.keys(f"{ACCOUNTS}.*")]
        report = tree_sweep.SweepReport(accounts=len(accounts))
        for account in (SYSTEM, *accounts):
            await tree_sweep.sweep(await self._bucket(account), older_than_s, report)
        return report

    def put_note(self, key: str, data: bytes) -> None:
        self._run(self._put_note(key, bytes(data)))

    async def _put_note(self, key: str, data: bytes) -> None:
        """One put (its directory's markers made the first time this process puts a note there):
        half a write's round trips. Never an object: a note is small (`ValueError` past half a
        bus message), so a removal never has one to delete."""
        if len(data) > self._nc.max_payload // 2:
            raise ValueError(f"a note of {len(data)} bytes: write it as a file")
        b = await self._accounts.of(key)
        folder = key.rpartition("/")[0]
        if folder not in self._noted_dirs:
            _, _, missing = await self._prepare(b, key)
            await tree_moves.mark_dirs(b, missing)
            if len(self._noted_dirs) >= 64:  # notes go to a few directories at a time (a minute's)
                self._noted_dirs.clear()
            self._noted_dirs.add(folder)
        value, headers = await tree_values.encode(b, key, data, self._nc.max_payload)
        await b.put(kv_key(key), value, headers=headers)

    def move(self, src: str, dst: str) -> None:
        self._run(self._move(src, dst))

    async def _move(self, src: str, dst: str) -> None:
        """A move in three steps, each acknowledged: its intent (`MOVES`), the copy (a directory's
        marker last, so it is whole once visible), the source purged. A worker killed between the
        copy and the purge left both visible; the intent lets whoever comes next finish it: the
        same move asked again (a retried request) or any process opening the bucket
        (`tree_moves.finish_all`)."""
        self._tails.drop(src, subtree=True)
        bs, bd = await self._accounts.of(src), await self._accounts.of(dst)
        if bs is not bd:
            raise ValueError("a move stays within one account")
        old, is_dir, missing = await self._prepare(bd, dst)
        if old is not None or is_dir is not None:
            if await tree_moves.finish(bd, moving(dst), (src, dst)):
                return  # this move, asked again after a worker died before its source was purged
            raise FileExistsError(dst)
        found, src_dir = await asyncio.gather(bs.get(kv_key(src)), bs.get(mark(src)))
        if found is None and src_dir is None:
            raise FileNotFoundError(src)
        source = found if found is not None else src_dir
        assert source is not None
        await bd.put(moving(dst), tree_moves.intent(src, dst, source.revision))
        faults.point("tree.move_intent")
        if found is not None:  # the value moves as it is (an object pointer included)
            await tree_moves.mark_dirs(bd, missing)
            await bd.put(kv_key(dst), found.value, headers=tree_values.kept(found))
        else:
            await tree_moves.copy_dir(bs, bd, src, dst, missing)
        faults.point("tree.move_copied")
        await bs.delete(kv_key(src) if found is not None else f"{kv_key(src)}.>")  # gone at once
        faults.point("tree.move_purged")
        await bd.delete(moving(dst))
