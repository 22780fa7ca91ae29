"""A whole deployment in one process on the in-memory bus: the actors a `Config` asks for, wired as a
worker wires them (`skald.runtime.host.worker.actors_on`) but on `MemoryBus`, over a temporary data
directory with the offline models unless the config names others, and jobs run as they are queued.
Its `call` answers as `SkaldClient.call` does (operation name, JSON-shaped body, decoded result or
typed error, the caller's last index sequence sent on), so a logic test written against a client
runs here without a nats-server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec

from skald.actors.kit.memory_bus import MemoryBus
from skald.messages import catalog
from skald.runtime.client.api import SkaldClient
from skald.runtime.client.transport import deadline_for
from skald.runtime.host.config import Config
from skald.runtime.host.worker import actors_on
from skald.store.treeport import Tree
from skald.store.uri import Identity, Namespace, check_name


def memory_config(data_dir: Path, **settings: Any) -> Config:
    """A worker's config for a logic test: the hashed embedder, snapshots never, then `settings`."""
    cfg = Config.from_env(env={}, data_dir=data_dir, embedder="hash")
    cfg.snapshot_interval_s = 3600
    for k, v in settings.items():
        setattr(cfg, k, v)
    return cfg


class MemoryClient(SkaldClient):
    """The real client's API (`call` and every typed method) with the in-memory bus as its
    transport: calls by operation name under one identity, sending on the last index sequence seen
    (read-your-writes)."""

    def __init__(self, bus: MemoryBus, identity: Identity, seen: list[int] | None = None) -> None:
        # No connection: `call` below is the whole transport.
        self.bus = bus
        self.identity = identity
        self.prefix = "memory"
        self.timeout_s = 30.0
        self.retries = False
        self.retried = 0
        # The highest index sequence any identity of this deployment saw acknowledged: one client's
        # write is seen by the next call of another (tests switch identities mid-conversation).
        self._seen = seen if seen is not None else [0]

    @property  # type: ignore[override]
    def index_seq(self) -> int:
        return self._seen[0]

    @index_seq.setter
    def index_seq(self, seq: int) -> None:
        self._seen[0] = max(self._seen[0], seq)

    async def call(self, op: catalog.Op[Any] | str, body: dict[str, Any] | msgspec.Struct | None = None, *,
                   msgpack: bool = False, timeout_s: float | None = None) -> Any:
        """An operation (by name or catalog entry), as `SkaldClient.call` answers it."""
        spec = op if isinstance(op, catalog.Op) else catalog.OPS[op]
        result = await self.bus.call(spec, body or {}, self.identity,  # type: ignore[arg-type]
                                     timeout_s or deadline_for(spec.name, body or {}, self.timeout_s),
                                     index_seq=self.index_seq)
        if isinstance(result, dict) and isinstance(result.get("index_seq"), int):
            self.index_seq = result["index_seq"]
        return result

    async def close(self) -> None:
        """Nothing to close: the deployment owns the bus."""

    def as_identity(self, *, account: str | None = None, user: str | None = None, agent: str | None = None,
                    peer: str | None = None, api_key: str | None = None) -> MemoryClient:
        """A client acting as another identity, as `SkaldClient.as_identity`."""
        given = {"account": account, "user": user, "agent": agent, "peer": peer}
        return MemoryClient(self.bus, Identity(**{k: check_name(k, v) for k, v in given.items() if v}), self._seen)


class MemoryDeployment(MemoryClient):
    """Every actor a config asks for, on a `MemoryBus`; itself the default identity's client."""

    def __init__(self, cfg: Config, actors: dict[str, object], bus: MemoryBus,
                 identity: Identity | None = None, tree: Tree | None = None) -> None:
        super().__init__(bus, identity or Identity())
        self.cfg = cfg
        self.data_dir = cfg.data_dir
        self.ns = Namespace(cfg.data_dir, tree)
        self.actors = actors
        self._work: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, data_dir: Path, tree: Tree | None = None, **settings: Any) -> MemoryDeployment:
        """Build and start the actors `settings` (Config fields) ask for, over `tree` (the data
        directory when None; a `MemoryTree` proves the actors reach their files only by the port)."""
        cfg = memory_config(data_dir, **settings)
        bus = MemoryBus(worker_id="memory", lease_ttl_s=cfg.lease_ttl_s)
        actors = await actors_on(cfg, bus, "memory", tree)
        d = cls(cfg, actors, bus, tree=tree)
        bus.serve(*actors.values())
        for actor in actors.values():
            if (start := getattr(actor, "start", None)) is not None:
                await start()
        d._work = asyncio.create_task(bus.work())
        return d

    async def close(self) -> None:
        """Stop running jobs, then every actor."""
        if self._work is not None:
            self._work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._work
        for actor in reversed(list(self.actors.values())):
            if (stop := getattr(actor, "stop", None)) is not None:
                await stop()

    def read_text(self, key: str) -> str:
        """A file of the deployment's tree, by key (`accounts/default/...`), whatever the tree."""
        return self.ns.tree.read(key).decode()

    def write_text(self, key: str, text: str) -> None:
        self.ns.tree.write(key, text.encode())

    @property
    def indexer(self) -> Any:
        return self.actors["indexer"]

    @property
    def retriever(self) -> Any:
        return self.actors["retriever"]


@contextlib.asynccontextmanager
async def memory_deployment(data_dir: Path, tree: Tree | None = None,
                            **settings: Any) -> AsyncIterator[MemoryDeployment]:
    """A started deployment, closed on the way out."""
    d = await MemoryDeployment.start(data_dir, tree, **settings)
    try:
        yield d
    finally:
        await d.close()
