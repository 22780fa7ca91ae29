"""The logic tests run with no NATS: connecting to a server from one of them is a failure."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from skald.store.memory_tree import MemoryTree
from skald.store.treeport import Tree
from support.memory_deploy import MemoryDeployment, memory_deployment


@pytest.fixture(autouse=True)
def _no_nats(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a logic test connected to NATS; use the in-memory bus")

    monkeypatch.setattr(nats, "connect", refuse)


@pytest.fixture(params=["local", "memory"])
def store_tree(request: pytest.FixtureRequest) -> Tree | None:
    """Every logic test runs twice: on the data directory, and on a tree in memory (so no actor can
    reach a file but through the Tree port, as the JetStream store requires)."""
    return MemoryTree() if request.param == "memory" else None


@pytest.fixture
async def client(tmp_path: Path, store_tree: Tree | None) -> AsyncIterator[MemoryDeployment]:
    """A whole deployment on the in-memory bus, called as a client would call Skald."""
    async with memory_deployment(tmp_path / "data", store_tree) as d:
        yield d


@pytest.fixture
async def deploy(tmp_path: Path, store_tree: Tree | None) -> AsyncIterator[Callable[..., Any]]:
    """Start a deployment on the in-memory bus with config overrides; yields (deployment, client),
    the same pair the worker tests' `deploy` gives (here the deployment is its own client)."""
    started: list[MemoryDeployment] = []

    async def start(**cfg: Any) -> tuple[MemoryDeployment, MemoryDeployment]:
        d = await MemoryDeployment.start(cfg.pop("data_dir", tmp_path / f"data{len(started)}"), store_tree, **cfg)
        started.append(d)
        return d, d

    yield start
    for d in started:
        await d.close()
