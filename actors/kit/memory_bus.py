"""Every bus port in one process's memory, for testing an actor's logic without a NATS server (as
httpx ships a mock transport beside its real ones).

    bus = MemoryBus()
    sessions = Sessions(ns, bus, "w1")
    bus.serve(sessions, archiver)               # `call` and `forward` reach their handlers
    await bus.call(catalog.SESSIONS_COMMIT, body, identity, 5.0)
    await bus.run_jobs()                        # the queued Phase 2 jobs, through their consumers

It keeps the rules the real bus keeps where an actor's correctness rests on them: a request body is
validated into the handler's Struct as it would be off the wire, a result comes back as JSON would
carry it, a typed error is raised as the caller would get it (anything untyped as INTERNAL, as the
host answers it), publishes and jobs are deduplicated by their message id, the index log keeps
sequences, and a lease is compare-and-set by revision and expires unless renewed. What it does not
model (several workers, a lost connection, a redelivery after `ack_wait`) is what the real-NATS
tests cover.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from skald.actors.kit.decl import Consumes, Handles, RetryLater, declarations
from skald.actors.kit.request import Attempt, Ctx
from skald.actors.kit.waiter import FutureWaiter
from skald.messages import errors
from skald.messages.catalog import Op, Queue
from skald.messages.index import IndexChange, IndexRow
from skald.store.index.types import row_subject_token
from skald.store.treeport import StoreUnavailable

_json = msgspec.json.Encoder()
log = logging.getLogger("skald.memory_bus")


class MemoryBus:
    """`skald.actors.kit.ports.Bus` in memory: events, work queue, index log, use counters, calls
    and leases, with what was published kept for a test to read."""

    def __init__(self, worker_id: str = "memory", lease_ttl_s: float = 6.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.worker_id = worker_id
        self.lease_ttl_s = lease_ttl_s
        self.clock = clock
        self.events: list[tuple[str, bytes]] = []  # (name, payload) in publish order
        self.notes: list[tuple[str, bytes]] = []
        self.jobs: dict[str, list[tuple[bytes, int]]] = defaultdict(list)  # queue -> (payload, deliveries)
        self.index: list[tuple[int, str, IndexChange]] = []  # (sequence, row token, change)
        self.usage: dict[tuple[str, str], int] = defaultdict(int)
        self.leases: dict[str, tuple[str, int, float]] = {}  # key -> (owner, revision, expires at)
        self._seen: set[str] = set()  # message ids stored once (events, jobs, use counts)
        self._waiters: dict[str, list[FutureWaiter]] = defaultdict(list)
        self._handlers: dict[str, tuple[Handles, Callable[..., Any]]] = {}
        self._consumers: dict[str, tuple[Consumes, Callable[..., Any]]] = {}
        self._changed = asyncio.Condition()
        self._revisions = itertools.count(1)

    # ----- hosting ----------------------------------------------------------------------------

    def serve(self, *actors: object) -> None:
        """Route calls and jobs to these actors' declared handlers and consumers."""
        for actor in actors:
            for decl, fn in declarations(actor):
                if isinstance(decl, Handles):
                    self._handlers[decl.op] = (decl, fn)
                else:
                    self._consumers[decl.queue] = (decl, fn)

    async def run_jobs(self, max_rounds: int = 100) -> int:
        """Run queued jobs through their consumers until none is left (a job that says
        `RetryLater` goes back on its queue for the next round); the number of jobs finished. Jobs
        of a queue no served actor consumes stay queued, as with no such worker running."""
        done = 0
        for _ in range(max_rounds):
            pending = [(q, item) for q, items in self.jobs.items() if q in self._consumers for item in items]
            if not pending:
                return done
            for queue in {q for q, _ in pending}:
                del self.jobs[queue]
            for queue, (payload, delivered) in pending:
                decl, fn = self._consumers[queue]
                job = msgspec.json.decode(payload, type=decl.job)
                try:
                    await fn(job, Attempt(delivered=delivered + 1, queue=queue))
                    done += 1
                except RetryLater:
                    if delivered + 1 < decl.max_deliver:
                        self.jobs[queue].append((payload, delivered + 1))
        raise AssertionError(f"jobs still queued after {max_rounds} rounds: {dict(self.jobs)}")

    async def work(self) -> None:
        """Run jobs as they are queued, until cancelled: the consumers of a running worker. A job
        that says `RetryLater` is queued again after its delay; one that raises is dropped after
        `max_deliver` tries, as the work queue terminates it."""
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: any(q in self._consumers and items
                                                         for q, items in self.jobs.items()))
            for queue in [q for q in self.jobs if q in self._consumers]:
                items = self.jobs.pop(queue)
                decl, fn = self._consumers[queue]
                for payload, delivered in items:
                    try:
                        await fn(msgspec.json.decode(payload, type=decl.job), Attempt(delivered + 1, queue))
                    except RetryLater as e:
                        if delivered + 1 < decl.max_deliver:
                            asyncio.get_running_loop().call_later(e.delay_s, self._requeue, queue, payload,
                                                                  delivered + 1)
                    except Exception:  # noqa: BLE001 - as the work queue: logged, retried, then dropped
                        log.exception("job on %s failed (try %d)", queue, delivered + 1)
                        if delivered + 1 < decl.max_deliver:
                            self._requeue(queue, payload, delivered + 1)

    def _requeue(self, queue: str, payload: bytes, delivered: int) -> None:
        self.jobs[queue].append((payload, delivered))
        asyncio.get_running_loop().create_task(self._wake())

    async def _wake(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ----- events -----------------------------------------------------------------------------

    async def publish_event(self, name: str, payload: msgspec.Struct, msg_id: str) -> None:
        if self._once(f"evt:{msg_id}"):
            data = _json.encode(payload)
            self.events.append((name, data))
            for w in self._waiters.pop(name, []):
                if not w.fut.done():
                    w.fut.set_result(data)

    async def last_event(self, name: str) -> bytes | None:
        return next((data for n, data in reversed(self.events) if n == name), None)

    async def notify(self, name: str, payload: msgspec.Struct) -> None:
        self.notes.append((name, _json.encode(payload)))

    @contextlib.asynccontextmanager
    async def waiter(self, event_name: str) -> AsyncIterator[FutureWaiter]:
        w = FutureWaiter()
        self._waiters[event_name].append(w)
        try:
            yield w
        finally:
            with contextlib.suppress(ValueError):
                self._waiters[event_name].remove(w)

    # ----- work queue ---------------------------------------------------------------------------

    async def enqueue(self, queue: Queue, payload: msgspec.Struct, msg_id: str) -> None:
        if self._once(f"job:{queue.name}:{msg_id}"):
            self.jobs[queue.name].append((_json.encode(payload), 0))
            await self._wake()

    # ----- index log --------------------------------------------------------------------------

    async def publish_index(self, changes: list[tuple[str, IndexChange]]) -> int:
        if not changes:
            return 0
        for token, change in changes:
            self.index.append((len(self.index) + 1, token, change))
        async with self._changed:
            self._changed.notify_all()
        return len(self.index)

    index_shards = 1  # one process, one index
    index_shard = 0

    async def latest_rows(self, keys: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], IndexRow]:
        want = {row_subject_token(*k): k for k in keys}
        out: dict[tuple[str, str, int], IndexRow] = {}
        for _, token, change in reversed(self.index):
            key = want.pop(token, None)
            if key is not None and change.upsert is not None:
                out[key] = change.upsert
            if not want:
                break
        return out

    async def index_last_seq(self) -> int:
        return len(self.index)

    async def index_next_seq(self, after: int) -> int:
        return after + 1 if after < len(self.index) else 0

    async def follow_index(self, start_seq: int) -> AsyncIterator[list[tuple[int, IndexChange]]]:
        at = max(1, start_seq)
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda start=at: len(self.index) >= start)
            batch = [(seq, change) for seq, _, change in self.index[at - 1:]]
            at += len(batch)
            yield batch

    # ----- use counters -------------------------------------------------------------------------

    async def count_usage(self, account: str, uris: list[str], msg_id: str) -> None:
        await self.add_usage(account, dict.fromkeys(uris, 1), msg_id)

    async def add_usage(self, account: str, counts: dict[str, int], msg_id: str) -> None:
        changed = False
        for uri, n in counts.items():
            if n > 0 and self._once(f"use:{msg_id}:{account}:{uri}"):
                self.usage[(account, uri)] += n
                changed = True
        if changed:
            async with self._changed:
                self._changed.notify_all()

    async def follow_usage(self) -> AsyncIterator[list[tuple[str, str, int]]]:
        sent: dict[tuple[str, str], int] = {}
        while True:
            batch = [(a, u, n) for (a, u), n in self.usage.items() if sent.get((a, u)) != n]
            if batch:
                sent.update({(a, u): n for a, u, n in batch})
                yield batch
                continue
            async with self._changed:
                await self._changed.wait()

    # ----- calls ------------------------------------------------------------------------------

    async def call(self, op: Op, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                   index_seq: int = 0, into: type | None = None) -> Any:
        got = await self._invoke(op.name, body, identity, timeout_s, index_seq=index_seq)
        if into is msgspec.Raw:
            return msgspec.Raw(got)
        return msgspec.json.decode(got) if into is None else msgspec.json.decode(got, type=into)

    async def forward(self, worker_id: str, op: str, body: msgspec.Struct, identity: Any, timeout_s: float) -> Any:
        if worker_id != self.worker_id:
            raise errors.Unavailable("no such worker on this bus", {"worker": worker_id})
        return msgspec.json.decode(await self._invoke(op, body, identity, timeout_s, forwarded=True))

    async def call_shard(self, shard: int, op: Op, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                         index_seq: int = 0, into: type | None = None) -> Any:
        """One process holds one index: shard 0 is this process's retriever."""
        if shard != 0:
            raise errors.Unavailable("this bus holds one index shard", {"shard": shard})
        got = await self._invoke(op.name, body, identity, timeout_s, index_seq=index_seq, forwarded=True)
        return msgspec.json.decode(got) if into is None else msgspec.json.decode(got, type=into)

    async def info(self) -> dict[str, Any]:
        return {"work": {"messages": sum(len(v) for v in self.jobs.values())},
                "index": {"messages": len(self.index), "last_seq": len(self.index)},
                "events": {"messages": len(self.events), "last_seq": len(self.events)},
                "usage": {"messages": len(self.usage)}}

    async def _invoke(self, op: str, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                      index_seq: int = 0, forwarded: bool = False) -> bytes:
        """The handler's result as JSON bytes; the request decoded from JSON as off the wire."""
        found = self._handlers.get(op)
        if found is None:
            raise errors.Unavailable("no worker serves this", {"op": op})
        decl, fn = found
        try:
            req = msgspec.json.decode(_json.encode(body), type=decl.request)
        except msgspec.ValidationError as e:
            raise errors.InvalidArgument(str(e), {"type": decl.request.__name__}) from e
        ctx = Ctx(identity, time.monotonic() + timeout_s, index_seq=index_seq, forwarded=forwarded)
        try:
            result = await asyncio.wait_for(fn(req, ctx), timeout_s)
        except TimeoutError as e:
            raise errors.DeadlineExceeded(f"no answer within {timeout_s:.3f}s", {"op": op}) from e
        except errors.SkaldError:
            raise
        except StoreUnavailable as e:  # as the host answers it: UNAVAILABLE, worth asking again
            raise errors.Unavailable(f"the store is not answering right now ({e}); retry", {"op": op}) from e
        except Exception as e:  # as the host answers it: a typed INTERNAL error, logged with its trace
            log.exception("%s failed", op)
            raise errors.Internal(f"internal error ({type(e).__name__})") from e
        return _json.encode(result)

    # ----- leases -----------------------------------------------------------------------------

    def _lease(self, key: str) -> tuple[str, int, float] | None:
        held = self.leases.get(key)
        if held is not None and held[2] <= self.clock():
            del self.leases[key]
            return None
        return held

    async def lease_create(self, key: str, owner: str) -> int | None:
        if self._lease(key) is not None:
            return None
        rev = next(self._revisions)
        self.leases[key] = (owner, rev, self.clock() + self.lease_ttl_s)
        return rev

    async def lease_get(self, key: str) -> tuple[str, int] | None:
        held = self._lease(key)
        return None if held is None else (held[0], held[1])

    async def lease_renew(self, key: str, owner: str, rev: int) -> int | None:
        held = self._lease(key)
        if held is None or held[1] != rev:
            return None
        new = next(self._revisions)
        self.leases[key] = (owner, new, self.clock() + self.lease_ttl_s)
        return new

    async def lease_release(self, key: str, rev: int) -> None:
        held = self._lease(key)
        if held is not None and held[1] == rev:
            del self.leases[key]

    def _once(self, msg_id: str) -> bool:
        """True the first time a message id is seen (the duplicate window of a JetStream stream)."""
        if msg_id in self._seen:
            return False
        self._seen.add(msg_id)
        return True
