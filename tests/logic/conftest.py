"""The logic tests run with no NATS: connecting to a server from one of them is a failure."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from support.memory_deploy import MemoryDeployment, memory_deployment


@pytest.fixture(autouse=True)
def _no_nats(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a logic test connected to NATS; use the in-memory bus")

    monkeypatch.setattr(nats, "connect", refuse)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[MemoryDeployment]:
    """A whole deployment on the in-memory bus, called as a client would call Skald."""
    async with memory_deployment(tmp_path / "data") as d:
        yield d


@pytest.fixture
async def deploy(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start a deployment on the in-memory bus with config overrides; yields (deployment, client),
    the same pair the worker tests' `deploy` gives (here the deployment is its own client)."""
    started: list[MemoryDeployment] = []

    async def start(**cfg: Any) -> tuple[MemoryDeployment, MemoryDeployment]:
        d = await MemoryDeployment.start(cfg.pop("data_dir", tmp_path / f"data{len(started)}"), **cfg)
        started.append(d)
        return d, d

    yield start
    for d in started:
        await d.close()
