"""The ports actors need from the outside world. `runtime/` supplies the implementations.

Every port is small and async; implementations run CPU-heavy work (embedding) off the
event loop and put a timeout on every network call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec
import numpy as np

from skald.messages.catalog import Op, Queue
from skald.messages.index import IndexChange, IndexRow


class Embedder(Protocol):
    """A text embedding model: query and passage vectors (an index is valid only for the model that built it)."""

    name: str  # model identity; an index is only valid for the model that built it
    dim: int

    async def embed_query(self, text: str) -> np.ndarray: ...

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Several queries' vectors, in one model call where the model allows (a row each)."""
        ...

    async def embed_passages(self, texts: list[str]) -> np.ndarray: ...


class Usage(msgspec.Struct, kw_only=True):
    """Token counts a model call reported."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class Completion(msgspec.Struct, kw_only=True):
    """A chat model's answer, with its usage and the model that gave it."""

    text: str
    usage: Usage
    model: str


class LLM(Protocol):
    """A chat model. `extractive` is True for the offline default, which never calls a model."""

    name: str
    extractive: bool

    async def complete(self, system: str, user: str, *, max_tokens: int = 512,
                       timeout_s: float | None = None, json: bool = False) -> Completion: ...


class Reranker(Protocol):
    """Relevance of each document to a query; raises on any failure (callers fall back)."""

    name: str

    async def rerank(self, query: str, documents: list[str]) -> list[float]: ...


class Summarizer(Protocol):
    """The LLM tasks of ingest: L0 abstracts and L1 overviews."""

    name: str
    extractive: bool

    async def file_abstract(self, name: str, text: str) -> str: ...

    async def dir_overview(self, name: str, children: list[tuple[str, bool, str]], readme: str | None) -> str: ...

    async def dir_abstract(self, name: str, overview: str) -> str: ...


class Waiter(Protocol):
    """The first event of one name after it was opened, or None after a timeout."""

    async def wait(self, timeout_s: float) -> bytes | None:
        """The first event's payload after the waiter was opened, or None after `timeout_s`."""
        ...


# The bus, by what its callers use. Each actor takes the union of the ports it needs; `Bus` is all of
# them, as the runtime's NATS implementation (`skald.runtime.bus.nats_bus.NatsBus`) and the in-memory
# one (`skald.actors.kit.memory_bus.MemoryBus`) provide. See docs/design/storage.md.


class Events(Protocol):
    """Events of record (stored, replayable) and notes (not stored), and waiting for one."""

    async def publish_event(self, name: str, payload: msgspec.Struct, msg_id: str) -> None:
        """Store an event on `<prefix>.evt.<name>`; a repeated `msg_id` stores nothing again."""
        ...

    async def last_event(self, name: str) -> bytes | None:
        """The newest stored event of that name (None when there is none)."""
        ...

    async def notify(self, name: str, payload: msgspec.Struct) -> None:
        """A note nobody needs to replay (progress): delivered to whoever listens now, not stored."""
        ...

    def waiter(self, event_name: str) -> AbstractAsyncContextManager[Waiter]:
        """A waiter for the next event of that name, opened before the step that causes it."""
        ...


class WorkQueue(Protocol):
    """Background jobs, each run once by one worker (redelivered until it succeeds or gives up)."""

    async def enqueue(self, queue: Queue, payload: msgspec.Struct, msg_id: str) -> None:
        """Queue a job; a repeated `msg_id` queues nothing again."""
        ...


class IndexLog(Protocol):
    """The index's change log: one entry per row (its latest change), replayed by every replica."""

    async def publish_index(self, changes: list[tuple[str, IndexChange]]) -> int:
        """Publish row changes (row token, change); the highest sequence acknowledged."""
        ...

    index_shards: int  # the index's shards (1: not sharded); rows go to the shard of their URI
    index_shard: int  # the shard this worker's replica follows and serves

    async def index_last_seq(self) -> int:
        """The log's last sequence (0 when empty)."""
        ...

    async def index_next_seq(self, after: int) -> int:
        """The sequence of the first change after `after` this worker's replica follows (0: none)."""
        ...

    def follow_index(self, start_seq: int) -> AsyncIterator[list[tuple[int, IndexChange]]]:
        """Batches of (sequence, change) from `start_seq` on, for as long as the caller iterates."""
        ...

    async def latest_rows(self, keys: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], IndexRow]:
        """The row the log holds now for each (account, uri, level): its latest upsert. A key whose
        latest change is a delete, that has none, or that could not be read is left out (a caller
        reusing what it finds does the work again for what is missing)."""
        ...


class UsageLog(Protocol):
    """Use counters of nodes (their `active_count`)."""

    async def count_usage(self, account: str, uris: list[str], msg_id: str) -> None:
        """One more use of each node; a repeated `msg_id` counts nothing again."""
        ...

    async def add_usage(self, account: str, counts: dict[str, int], msg_id: str) -> None:
        """`counts[uri]` more uses of each node; a repeated `msg_id` counts nothing again."""
        ...

    def follow_usage(self) -> AsyncIterator[list[tuple[str, str, int]]]:
        """Batches of (account, uri, total uses): every node's total first, then each change."""
        ...


class Calls(Protocol):
    """Requests to other actors (actors never import each other) and to one worker by name."""

    async def call(self, op: Op, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                   index_seq: int = 0, into: type | None = None) -> Any:
        """Another actor's result (decoded JSON, converted `into` a message type, or `msgspec.Raw`
        JSON text), or its typed error raised."""
        ...

    async def forward(self, worker_id: str, op: str, body: msgspec.Struct, identity: Any, timeout_s: float) -> Any:
        """Send a request to one worker (the owner of what it touches); its result or its typed error."""
        ...

    async def info(self) -> dict[str, Any]:
        """Depths and last sequences of the bus's streams, for `system.stats`."""
        ...


class ShardCalls(Protocol):
    """Requests to the retrievers of one shard of the index (a sharded index's scatter and gather)."""

    async def call_shard(self, shard: int, op: Op, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                         index_seq: int = 0, into: type | None = None) -> Any:
        """The shard's result, answered from its rows alone, or its typed error raised (UNAVAILABLE
        when no retriever of that shard answers)."""
        ...


class LeaseStore(Protocol):
    """One writer per key across workers: compare-and-set by revision, expiring unless renewed."""

    async def lease_create(self, key: str, owner: str) -> int | None:
        """The new revision, or None when someone holds the key."""
        ...

    async def lease_get(self, key: str) -> tuple[str, int] | None:
        """(owner, revision) of a held key, None when free."""
        ...

    async def lease_renew(self, key: str, owner: str, rev: int) -> int | None:
        """The new revision, or None when the lease was lost (expired or taken)."""
        ...

    async def lease_release(self, key: str, rev: int) -> None:
        """Free the key if it is still at `rev`."""
        ...


class Bus(Events, WorkQueue, IndexLog, UsageLog, Calls, LeaseStore, Protocol):
    """Every bus port: what a host hands its actors."""
