"""Everything Skald does with NATS besides request/reply: work queues, the index log, events,
leases (the streams themselves are declared in `streams.py`). With host.py and streams.py, the only
modules that touch nats-py's JetStream API."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import (
    NoRespondersError,
)
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import (
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)

from skald.actors.kit import clock as clock_mod
from skald.actors.kit.waiter import FutureWaiter
from skald.messages import errors, subjects
from skald.messages.catalog import Op, Queue
from skald.messages.envelope import (
    H_ACCOUNT,
    H_AGENT,
    H_CLOCK,
    H_INDEX_SEQ,
    H_PEER,
    H_ROOT,
    H_TIMEOUT_MS,
    H_USER,
    H_WORKER,
)
from skald.messages.index import IndexChange
from skald.runtime.bus.index_stream import IndexStream
from skald.runtime.bus.jspublish import AckedPublisher
from skald.runtime.bus.streams import RETRY_AFTER_MS, retry_transient, stream_name
from skald.runtime.client import replies, tracing

log = logging.getLogger("skald.bus")
_enc = msgspec.msgpack.Encoder()
_change_dec = msgspec.msgpack.Decoder(IndexChange)
_counter_dec = msgspec.json.Decoder(dict[str, str])  # a JetStream counter's body: {"val": "<total>"}
H_USAGE_NODE = "Skald-Usage-Node"  # on a use counter: base64url of `account NUL uri`

WORK_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
PUBLISH_RETRY_S = 8.0  # longer than a JetStream stream leader election (~5 s measured)


class _Reply(msgspec.Struct):
    """A reply envelope read with its result left as JSON text: a caller decodes it into the type
    it wants, or passes it on as it is (`call(..., into=msgspec.Raw)`)."""

    status: str = ""
    result: msgspec.Raw = msgspec.Raw(b"null")
    error: dict[str, Any] | None = None


_reply = msgspec.json.Decoder(_Reply)


H_FORWARDED = "Skald-Forwarded"
LEASE_TTL_S = 6.0


class LocalServer(Protocol):
    """The host serving this process's actors (`ActorHost`), for calls that need not leave it."""

    def serves(self, op: str) -> bool: ...

    async def call_local(self, op: str, body: msgspec.Struct, identity: Any, timeout_s: float,
                         index_seq: int = 0, into: type | None = None) -> Any: ...


class NatsBus(IndexStream):
    """The `Bus` port over one NATS connection."""

    def __init__(self, nc: NATS, prefix: str, worker_id: str = "", lease_ttl_s: float = LEASE_TTL_S,
                 worker_token: Callable[[], str] = lambda: "", replicas: int = 1,
                 index_shards: int = 1, index_shard: int = 0) -> None:
        self.nc = nc
        # A sharded index (store/index/shards.py): rows are published under their shard's token and
        # this worker's replica follows shard `index_shard` alone.
        self.index_shards = index_shards
        self.index_shard = index_shard
        self.js = nc.jetstream(timeout=10.0)
        self.prefix = prefix
        self.worker_token = worker_token
        self.replicas = replicas
        self.worker_id = worker_id
        self.lease_ttl_s = lease_ttl_s
        self._kv: Any = None
        self._acked = AckedPublisher(nc, 10.0)
        self._replies = replies.of(nc)
        self.local: LocalServer | None = None  # set by the worker when in-process calls are on

    # ----- leases (single writer per key across workers) -------------------------------------

    async def _leases(self) -> Any:
        if self._kv is None:
            name = stream_name(self.prefix, "leases")
            try:
                self._kv = await self.js.key_value(name)
            except Exception:  # noqa: BLE001 - absent: create it (another worker may race us)
                try:
                    self._kv = await self.js.create_key_value(bucket=name, ttl=self.lease_ttl_s, history=1,
                                                              replicas=self.replicas)
                except Exception:  # noqa: BLE001
                    self._kv = await self.js.key_value(name)
        return self._kv

    async def _lease_op(self, op: Callable[[Any], Awaitable[Any]]) -> Any:
        """One lease-bucket operation. While the bucket's stream is electing a leader (a new
        bucket, a server lost) JetStream has no answer for a moment: that is retried briefly, then
        UNAVAILABLE (worth a retry), never INTERNAL."""
        async def once() -> Any:
            return await op(await self._leases())

        return await retry_transient(once, PUBLISH_RETRY_S, _unavailable("the lease bucket is not answering"))

    async def lease_create(self, key: str, owner: str) -> int | None:
        async def op(kv: Any) -> int | None:
            for _ in range(3):
                try:
                    return int(await kv.create(key, owner.encode()))
                except KeyWrongLastSequenceError:
                    return None
                except KeyNotFoundError:
                    # nats-py's create re-reads a key that was in its way (to tell a deleted one);
                    # a lease that expired in between is gone by then: the key is free, ask again.
                    continue
            return None

        return await self._lease_op(op)  # type: ignore[no-any-return]

    async def lease_get(self, key: str) -> tuple[str, int] | None:
        async def op(kv: Any) -> tuple[str, int] | None:
            try:
                e = await kv.get(key)
            except (KeyNotFoundError, KeyDeletedError):
                return None
            return (e.value or b"").decode(), int(e.revision or 0)

        return await self._lease_op(op)  # type: ignore[no-any-return]

    async def lease_renew(self, key: str, owner: str, rev: int) -> int | None:
        """Compare-and-set on the revision: a stale owner's renewal fails (fencing)."""
        async def op(kv: Any) -> int | None:
            try:
                return int(await kv.update(key, owner.encode(), last=rev))
            except KeyWrongLastSequenceError:
                return None

        return await self._lease_op(op)  # type: ignore[no-any-return]

    async def lease_release(self, key: str, rev: int) -> None:
        kv = await self._leases()
        with contextlib.suppress(Exception):
            await kv.delete(key, last=rev)

    async def forward(self, worker_id: str, op: str, body: msgspec.Struct, identity: Any, timeout_s: float) -> Any:
        """Send a request to one worker (the owner of what it touches); its result or its typed error."""
        return msgspec.json.decode(await self._request(f"{self.prefix}.direct.{worker_id}.{op}", body, identity,
                                                       timeout_s, {H_FORWARDED: "1"}, {"worker": worker_id}))

    async def call_shard(self, shard: int, op: Op, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                         index_seq: int = 0, into: type | None = None) -> Any:
        """Ask the retrievers of one index shard (its queue group) to answer from their shard alone."""
        extra = {H_FORWARDED: "1", **({H_INDEX_SEQ: str(index_seq)} if index_seq else {})}
        got = await self._request(subjects.shard_request(self.prefix, shard, op.name), body, identity, timeout_s,
                                  extra, {"op": op.name, "shard": shard})
        return msgspec.json.decode(got) if into is None else msgspec.json.decode(got, type=into)

    async def call(self, op: Op, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                   index_seq: int = 0, into: type | None = None) -> Any:
        """Ask another actor (through its queue group) on behalf of the caller's identity; one
        this process also runs answers in-process (the same validation, deadline, errors, journal).
        The result as decoded JSON, converted `into` a type, or with `into=msgspec.Raw` its JSON
        text (a relay that only passes it on decodes and encodes nothing)."""
        if self.local is not None and self.local.serves(op.name):
            return await self.local.call_local(op.name, body, identity, timeout_s, index_seq, into)
        subject = (subjects.internal if op.internal else subjects.request)(self.prefix, op.name)
        extra = {H_INDEX_SEQ: str(index_seq)} if index_seq else {}
        got = await self._request(subject, body, identity, timeout_s, extra, {"op": op.name})
        if into is msgspec.Raw:
            return got
        return msgspec.json.decode(got) if into is None else msgspec.json.decode(got, type=into)

    async def _request(self, subject: str, body: msgspec.Struct, identity: Any, timeout_s: float,
                       extra: dict[str, str], where: dict[str, Any]) -> msgspec.Raw:
        """The result's JSON text, or the callee's typed error raised."""
        headers = {H_ACCOUNT: identity.account, H_USER: identity.user, H_AGENT: identity.agent,
                   H_TIMEOUT_MS: str(max(1, int(timeout_s * 1000))), **extra}
        if identity.peer:
            headers[H_PEER] = identity.peer
        if (at := clock_mod.NOW.get()) is not None:
            headers[H_CLOCK] = repr(at)  # the owner stamps with the same clock as the first hop
        if token := self.worker_token():
            headers[H_WORKER] = token
            if identity.is_root:
                headers[H_ROOT] = "1"
        tracing.inject(headers)
        try:
            msg = await self._replies.request(subject, msgspec.json.encode(body), timeout_s + 0.25, headers)
        except NoRespondersError as e:
            raise errors.Unavailable("no worker serves this", where) from e
        except NatsTimeout as e:
            raise errors.DeadlineExceeded("no answer in time", where) from e
        env = _reply.decode(msg.data)
        if env.status == "ok":
            return env.result
        err = env.error or {}
        raise errors.from_wire(str(err.get("code", "INTERNAL")), str(err.get("message", "")), err.get("details"))

    async def _through_election(self, op: Callable[[], Awaitable[Any]], what: str) -> Any:
        """One JetStream operation, retried with backoff for up to PUBLISH_RETRY_S while the stream
        has no leader (an election takes a few seconds), then UNAVAILABLE. Every caller is safe to
        repeat: publishes carry a `Nats-Msg-Id` or go to a subject that keeps only its latest message."""
        return await retry_transient(op, PUBLISH_RETRY_S, _unavailable(what))

    async def _js_publish(self, subject: str, data: bytes, headers: dict[str, str] | None = None) -> Any:
        return await self._through_election(lambda: self._acked.publish(subject, data, headers),
                                            "JetStream did not store the write in time")

    async def publish_event(self, name: str, payload: msgspec.Struct, msg_id: str) -> None:
        await self._js_publish(subjects.event(self.prefix, name), msgspec.json.encode(payload), {"Nats-Msg-Id": msg_id})

    async def last_event(self, name: str) -> bytes | None:
        """The newest stored event on `<prefix>.evt.<name>` (None when there is none)."""
        async def get() -> bytes | None:
            try:
                msg = await self.js.get_last_msg(stream_name(self.prefix, "events"), subjects.event(self.prefix, name))
            except NotFoundError:
                return None
            return bytes(msg.data or b"")

        return await self._through_election(get, "the events stream is not answering")  # type: ignore[no-any-return]

    async def enqueue(self, queue: Queue, payload: msgspec.Struct, msg_id: str) -> None:
        headers = {"Nats-Msg-Id": msg_id}
        tracing.inject(headers)  # the job's span joins the trace of the request that enqueued it
        await self._js_publish(subjects.work(self.prefix, queue.name), msgspec.json.encode(payload), headers)

    async def notify(self, name: str, payload: msgspec.Struct) -> None:
        """Core NATS, not stored: progress and other things nobody needs to replay."""
        await self.nc.publish(subjects.note(self.prefix, name), msgspec.json.encode(payload))

    @contextlib.asynccontextmanager
    async def waiter(self, event_name: str) -> AsyncIterator[FutureWaiter]:
        w = FutureWaiter()

        async def cb(msg: Any) -> None:
            if not w.fut.done():
                w.fut.set_result(msg.data)

        sub = await self.nc.subscribe(subjects.event(self.prefix, event_name), cb=cb)
        try:
            yield w
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def count_usage(self, account: str, uris: list[str], msg_id: str) -> None:
        await self.add_usage(account, dict.fromkeys(uris, 1), msg_id)

    async def add_usage(self, account: str, counts: dict[str, int], msg_id: str) -> None:
        """A JetStream counter per node (`Nats-Incr`); the node rides in a header, since the subject
        holds only its hash. Deduplicated per node by `msg_id`."""
        async def one(uri: str, n: int) -> None:
            token = subjects.usage_token(account, uri)
            key = base64.urlsafe_b64encode(f"{account}\x00{uri}".encode()).decode()
            await self._js_publish(subjects.usage(self.prefix, token), b"",
                                   {"Nats-Incr": f"+{n}", H_USAGE_NODE: key, "Nats-Msg-Id": f"{msg_id}:{token}"})

        await asyncio.gather(*(one(u, n) for u, n in counts.items() if n > 0))

    async def follow_usage(self) -> AsyncIterator[list[tuple[str, str, int]]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def cb(msg: Any) -> None:
            queue.put_nowait(msg)

        cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT)
        sub = await self.js.subscribe(f"{self.prefix}.usage.>", stream=stream_name(self.prefix, "usage"), cb=cb,
                                      ordered_consumer=True, config=cfg,
                                      pending_msgs_limit=1_000_000, pending_bytes_limit=2**31 - 1)
        try:
            while True:
                batch = [await queue.get()]
                while not queue.empty() and len(batch) < 4096:
                    batch.append(queue.get_nowait())
                out = []
                for msg in batch:
                    try:
                        account, uri = base64.urlsafe_b64decode((msg.headers or {})[H_USAGE_NODE]).decode().split(
                            "\x00", 1)
                        out.append((account, uri, int(_counter_dec.decode(msg.data)["val"])))
                    except (KeyError, ValueError, msgspec.DecodeError):
                        log.error("undecodable use counter on %s skipped", msg.subject)
                yield out
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind in ("work", "index", "events", "usage"):
            try:
                si = await self.js.stream_info(stream_name(self.prefix, kind))
                out[kind] = {"messages": si.state.messages, "last_seq": si.state.last_seq}
            except Exception as e:  # noqa: BLE001 - reported, not raised: stats must answer
                out[kind] = {"error": str(e)}
        return out


def _unavailable(what: str) -> Callable[[Exception], Exception]:
    """A transient JetStream failure that outlasted its retries, as callers are told it: worth a retry."""
    def make(e: Exception) -> Exception:
        return errors.Unavailable(f"{what} (JetStream leader election?); retry",
                             {"error": type(e).__name__, "retry_after_ms": RETRY_AFTER_MS})
    return make
