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
from skald.messages.index import IndexChange


class Embedder(Protocol):
    name: str  # model identity; an index is only valid for the model that built it
    dim: int

    async def embed_query(self, text: str) -> np.ndarray: ...

    async def embed_passages(self, texts: list[str]) -> np.ndarray: ...


class Usage(msgspec.Struct, kw_only=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class Completion(msgspec.Struct, kw_only=True):
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
    async def wait(self, timeout_s: float) -> bytes | None: ...


class Bus(Protocol):
    """Everything an actor may do on the bus beyond answering its requests; `runtime.bus.NatsBus`
    implements it over NATS."""

    async def publish_event(self, name: str, payload: msgspec.Struct, msg_id: str) -> None: ...

    async def last_event(self, name: str) -> bytes | None: ...

    async def enqueue(self, queue: Queue, payload: msgspec.Struct, msg_id: str) -> None: ...

    async def publish_index(self, changes: list[tuple[str, IndexChange]]) -> int: ...

    async def notify(self, name: str, payload: msgspec.Struct) -> None: ...

    def waiter(self, event_name: str) -> AbstractAsyncContextManager[Waiter]: ...

    async def index_last_seq(self) -> int: ...

    def follow_index(self, start_seq: int) -> AsyncIterator[list[tuple[int, IndexChange]]]: ...

    async def info(self) -> dict[str, Any]: ...

    async def count_usage(self, account: str, uris: list[str], msg_id: str) -> None:
        """One more use of each node (its `active_count`); a repeated `msg_id` counts nothing again."""
        ...

    async def add_usage(self, account: str, counts: dict[str, int], msg_id: str) -> None:
        """`counts[uri]` more uses of each node, one message per node; a repeated `msg_id` counts
        nothing again."""
        ...

    def follow_usage(self) -> AsyncIterator[list[tuple[str, str, int]]]:
        """Batches of (account, uri, total uses): every node's total first, then each change."""
        ...

    async def call(self, op: Op, body: msgspec.Struct, identity: Any, timeout_s: float, *,
                   index_seq: int = 0, into: type | None = None) -> Any:
        """Another actor's result (decoded JSON, or converted `into` a message type) or its typed
        error; actors never import each other."""
        ...

    async def forward(self, worker_id: str, op: str, body: msgspec.Struct, identity: Any, timeout_s: float) -> Any:
        """Send a request to one worker (the owner of what it touches); its result or its typed error."""
        ...

    # Leases: one writer per key across workers (a KV entry per key, compare-and-set by revision).
    async def lease_create(self, key: str, owner: str) -> int | None:
        """The new revision, or None when someone holds the key."""
        ...

    async def lease_get(self, key: str) -> tuple[str, int] | None: ...

    async def lease_renew(self, key: str, owner: str, rev: int) -> int | None:
        """The new revision, or None when the lease was lost (expired or taken)."""
        ...

    async def lease_release(self, key: str, rev: int) -> None: ...
