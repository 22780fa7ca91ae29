"""The JetStream side of the tree (docs/design/storage.md): one key-value bucket and one object
store per account, placed by tags, and what the tree does with a bucket, each answered by the
stream's leader: read a key, publish a value (optionally compare-and-set on the key's last
revision), list the keys under a subject wildcard, purge a key or a subtree at once.

Built on the bucket's stream directly rather than nats-py's KeyValue: the KV API has no headers on
put or get (a file's size must be listable without fetching its bytes), and its bucket creation drops
placement tags. The stream's configuration is the KV layout, so the `nats kv` tools still read it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.js import api
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError

from skald.runtime.bus import leader_reads

KV_OP = "KV-Operation"
SIZE = "Skald-Size"  # an object pointer's file size, readable from headers alone
MTIME = "Skald-Mtime"  # a moved file's modification time (a move keeps it, as rename does)
EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
_PLAIN_ACCOUNT = re.compile(r"[A-Za-z0-9_-]{1,64}")
SYSTEM = "_"  # the bucket of keys outside any account
LEADER_WAIT_S = 5.0  # how long a listing waits for a group electing its leader (an election takes seconds)
MAX_PAGES = 1000  # the server pages subject listings by 100,000: a listing past 10^8 keys is refused
FANOUT = 64  # reads or writes of one call in flight at once
T = TypeVar("T")


async def bounded(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Awaitables run FANOUT at a time, results in order."""
    sem = asyncio.Semaphore(FANOUT)

    async def one(aw: Awaitable[T]) -> T:
        async with sem:
            return await aw

    return list(await asyncio.gather(*(one(a) for a in aws)))


def bucket_name(base: str, account: str) -> str:
    """An account's bucket: `<base>_<account>` when the account name is a valid bucket token, else
    a digest of it (account names may hold `.` and `@`, bucket names may not)."""
    if account == SYSTEM:
        return f"{base}__"
    if _PLAIN_ACCOUNT.fullmatch(account):
        return f"{base}_{account}"
    return f"{base}_h{hashlib.sha256(account.encode()).hexdigest()[:24]}"


def account_of(key: str) -> str | None:
    """The account a tree key belongs to (`accounts/<a>/...`, `uploads/<a>/...`), SYSTEM for other
    keys, None for the two directories that hold every account."""
    segs = key.split("/", 2)
    if segs[0] in ("accounts", "uploads"):
        return segs[1] if len(segs) > 1 else None
    return SYSTEM


class Conflicted(Exception):
    """A compare-and-set lost: the key's revision was not the one expected."""


@dataclass(frozen=True, slots=True)
class Found:
    """A key's last value as read from the stream's leader: its bytes, revision and write time."""

    value: bytes
    revision: int
    mtime: float
    headers: dict[str, str]
    deleted: bool = False  # the key's last message is a delete (its revision is what a create must expect)

    @classmethod
    def of(cls, data: bytes, seq: int, headers: dict[str, str], written: float) -> Found:
        """A last message as read: its time the moved file's own (`MTIME`) or when it was written."""
        return cls(data, seq, float(headers[MTIME]) if MTIME in headers else written, headers,
                   headers.get(KV_OP) in ("DEL", "PURGE"))


class Bucket:
    """One account's bucket: its KV stream and its object store."""

    def __init__(self, js: Any, name: str, objects: Any) -> None:
        self.js = js
        self.name = name
        self.stream = f"KV_{name}"
        self.pre = f"$KV.{name}."
        self.objects = objects

    @classmethod
    async def open(cls, js: Any, name: str, replicas: int, tags: list[str] | None) -> Bucket:
        """The bucket, created on first use (idempotent: a racing creator's identical config is fine)."""
        placement = api.Placement(tags=tags) if tags else None
        config = api.StreamConfig(
            name=f"KV_{name}", subjects=[f"$KV.{name}.>"], allow_direct=False, allow_rollup_hdrs=True,
            deny_delete=True, discard=api.DiscardPolicy.NEW, duplicate_window=120.0, max_msgs_per_subject=1,
            num_replicas=replicas, storage=api.StorageType.FILE, placement=placement)
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            try:
                await js.add_stream(config)
            except BadRequestError as refused:
                try:
                    await js.stream_info(config.name)  # created meanwhile by another worker
                except NotFoundError:
                    raise refused from None  # refused for itself (its placement, its replicas)
        try:
            objects = await js.object_store(f"{name}_big")
        except Exception:  # noqa: BLE001 - absent: create it (idempotent)
            objects = await js.create_object_store(
                f"{name}_big", config=api.ObjectStoreConfig(replicas=replicas, placement=placement))
        return cls(js, name, objects)

    async def last(self, kkey: str) -> Found | None:
        """A key's last message, a delete included, from the stream's leader (read-your-writes)."""
        try:
            msg = await self.js.get_msg(self.stream, subject=self.pre + kkey, direct=False)
        except NotFoundError:
            return None
        return Found.of(bytes(msg.data or b""), int(msg.seq or 0), dict(msg.headers or {}),
                        msg.time.timestamp() if msg.time else 0.0)

    async def get(self, kkey: str) -> Found | None:
        """A key's live value; None when there is none or it was deleted."""
        found = await self.last(kkey)
        return None if found is None or found.deleted else found

    async def get_many(self, kkeys: Sequence[str]) -> list[Found | None]:
        """`get` of many keys, from the stream's leader, as one pipelined exchange
        (`leader_reads`): a listing's sizes and times, a directory's values to move."""
        got = await leader_reads.last_messages(self.js._nc, self.js._prefix, self.stream,
                                               [self.pre + k for k in kkeys], self.js._timeout)
        found = [None if m is None else Found.of(m.data, m.seq, leader_reads.headers_of(m.hdrs) if m.hdrs else {},
                                                 leader_reads.seconds(m.time) if m.time else 0.0) for m in got]
        return [None if f is None or f.deleted else f for f in found]

    async def create(self, kkey: str, value: bytes, headers: dict[str, str] | None = None) -> bool:
        """Publish only if the key has no live value: True when this call created it."""
        try:
            await self.put(kkey, value, headers=headers, last=0)
            return True
        except Conflicted:
            found = await self.last(kkey)
            if found is None or not found.deleted:
                return False
        try:  # the key was deleted: expect the delete's revision
            await self.put(kkey, value, headers=headers, last=found.revision)
            return True
        except Conflicted:
            return False

    async def put(self, kkey: str, value: bytes, *, headers: dict[str, str] | None = None,
                  last: int | None = None) -> int:
        """Publish a key's value, acknowledged by the stream (replicated) before returning; with
        `last`, only if the key's revision is still that (0: only if the key has none)."""
        hdrs = dict(headers or {})
        if last is not None:
            hdrs[EXPECTED_LAST] = str(last)
        try:
            ack = await self.js.publish(self.pre + kkey, value, stream=self.stream, headers=hdrs or None)
        except BadRequestError as e:
            if last is not None and getattr(e, "err_code", None) == 10071:
                raise Conflicted(kkey) from e
            raise
        return int(ack.seq)

    async def delete(self, pattern: str) -> None:
        """Remove a key, or every key matching a wildcard, at once: a purge of their subjects,
        answered by the stream's leader once replicated (no tombstone is kept, so a later `create`
        of the key expects no revision)."""
        await self.js.purge_stream(self.stream, subject=self.pre + pattern)

    async def keys(self, pattern: str) -> list[str]:
        """The live keys matching `pattern` (a subject wildcard under the bucket), as the stream's
        leader knows them: what any worker wrote before is there. Only the leader's answer counts:
        while a group has no leader every member answers stream info, a replica back on an empty
        disk included, so an answer that names no leader is asked again until one does (an
        ephemeral consumer may sit on such a replica too, so a listing never reads through one).
        Past the server's page of subjects the listing is read page by page."""
        found: list[str] = []
        for _ in range(MAX_PAGES):
            page, total = await self._subjects_page(pattern, len(found))
            found += [subj[len(self.pre):] for subj in page]
            if not page or len(found) >= total:
                return found
        raise ServiceUnavailableError(description=f"listing {pattern}: more than {MAX_PAGES} pages")

    async def _subjects_page(self, pattern: str, offset: int) -> tuple[list[str], int]:
        """One page of the leader's subjects under `pattern` and how many there are in all."""
        request = json.dumps({"subjects_filter": self.pre + pattern, "offset": offset}).encode()
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            # nats-py's stream_info takes no offset and drops the answer's cluster leader and total:
            # the same API request, read whole (its error handling is nats-py's own).
            resp = await self.js._api_request(f"{self.js._prefix}.STREAM.INFO.{self.stream}", request,
                                              timeout=self.js._timeout)
            if (resp.get("cluster") or {}).get("leader") or "cluster" not in resp:
                subjects = list((resp.get("state") or {}).get("subjects") or {})
                return subjects, int(resp.get("total") or len(subjects))
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(description=f"{self.stream} has no leader to list from")
            await asyncio.sleep(0.1)


class Tails:
    """The last value and revision of the files this process appended to, up to a byte budget: the
    next append is then one compare-and-set publish with no read. A session's live log has one
    writer, so the entry is right unless another worker wrote the file since; then the publish is
    refused (its revision moved), the entry dropped and the file read again."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self._items: OrderedDict[str, tuple[int, bytes]] = OrderedDict()

    def get(self, key: str) -> tuple[int, bytes] | None:
        got = self._items.get(key)
        if got is not None:
            self._items.move_to_end(key)
        return got

    def put(self, key: str, revision: int, data: bytes) -> None:
        self.drop(key)
        if len(data) > self.budget // 8:
            return  # a big file would push out every log: appended by reading it
        self._items[key] = (revision, data)
        self.size += len(data)
        while self.size > self.budget:
            _, (_, old) = self._items.popitem(last=False)
            self.size -= len(old)

    def drop(self, key: str, subtree: bool = False) -> None:
        """Forget a file (and, with `subtree`, every file below it as a directory)."""
        gone = [k for k in self._items if k.startswith(key + "/")] if subtree else []
        for k in (key, *gone):
            if k in self._items:
                self.size -= len(self._items.pop(k)[1])
