"""A whole deployment in one process on the in-memory bus: the five actors over a temporary data
directory, with the offline models (hashed embedder, extractive LLM) and jobs run as they are
queued. Its `call` answers as `SkaldClient.call` does (operation name, JSON-shaped body, decoded
result or typed error, the caller's last index sequence sent on), so a logic test written against a
client runs here without a nats-server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from skald.actors.archive.handlers import Archiver
from skald.actors.assembler.handlers import Assembler
from skald.actors.indexer.handlers import Indexer
from skald.actors.kit.memory_bus import MemoryBus
from skald.actors.retriever.handlers import Retriever
from skald.actors.retriever.list_search import SearchSettings
from skald.actors.session.handlers import Sessions
from skald.messages import catalog
from skald.runtime.models.embedders import HashEmbedder
from skald.runtime.models.llm import ExtractiveLLM, ExtractiveSummarizer
from skald.store.uri import Identity, Namespace, check_name


class MemoryDeployment:
    """Every actor of `skald up`, on a `MemoryBus`."""

    def __init__(self, data_dir: Path, identity: Identity | None = None,
                 settings: SearchSettings | None = None) -> None:
        self.data_dir = data_dir
        self.ns = Namespace(data_dir)
        self.identity = identity or Identity()
        self.bus = MemoryBus(worker_id="memory")
        embedder, llm = HashEmbedder(), ExtractiveLLM()
        self.sessions = Sessions(self.ns, self.bus, "memory")
        self.archiver = Archiver(self.ns, llm, self.bus, worker_id="memory")
        self.indexer = Indexer(self.ns, embedder, ExtractiveSummarizer(), self.bus)
        self.retriever = Retriever(self.ns, embedder, self.bus, data_dir / ".skald", llm, None,
                                   settings or SearchSettings())
        self.assembler = Assembler(self.ns, self.bus, llm)
        self.bus.serve(self.sessions, self.archiver, self.indexer, self.retriever, self.assembler)
        self.client = MemoryClient(self.bus, self.identity)
        self._work: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for actor in (self.sessions, self.archiver, self.retriever):
            await actor.start()
        self._work = asyncio.create_task(self.bus.work())

    async def close(self) -> None:
        if self._work is not None:
            self._work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._work
        for actor in (self.assembler, self.retriever, self.indexer, self.archiver, self.sessions):
            await actor.stop()

    async def call(self, op: str, body: dict[str, Any] | None = None, timeout_s: float = 30.0) -> Any:
        """An operation by its public name, as a client would call it."""
        return await self.client.call(op, body, timeout_s)

    def as_identity(self, **kw: str | None) -> MemoryClient:
        """A client acting as another identity (account, user, agent, peer), as `SkaldClient.as_identity`."""
        return self.client.as_identity(**kw)


class MemoryClient:
    """What a `SkaldClient` does for a test: calls by operation name under one identity, sending on
    the last index sequence it saw (read-your-writes)."""

    def __init__(self, bus: MemoryBus, identity: Identity) -> None:
        self.bus = bus
        self.identity = identity
        self.index_seq = 0

    async def call(self, op: str, body: dict[str, Any] | None = None, timeout_s: float = 30.0) -> Any:
        spec = catalog.OPS[op]
        result = await self.bus.call(spec, body or {}, self.identity, timeout_s,  # type: ignore[arg-type]
                                     index_seq=self.index_seq)
        if isinstance(result, dict) and isinstance(result.get("index_seq"), int):
            self.index_seq = max(self.index_seq, result["index_seq"])
        return result

    def as_identity(self, **kw: str | None) -> MemoryClient:
        names = {k: check_name(k, v) for k, v in kw.items() if k in ("account", "user", "agent", "peer") and v}
        return MemoryClient(self.bus, Identity(**names))


@contextlib.asynccontextmanager
async def memory_deployment(data_dir: Path, **kw: Any) -> AsyncIterator[MemoryDeployment]:
    """A started deployment, closed on the way out."""
    d = MemoryDeployment(data_dir, **kw)
    await d.start()
    try:
        yield d
    finally:
        await d.close()
