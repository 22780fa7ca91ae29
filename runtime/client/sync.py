"""The client for code without an event loop."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from skald.runtime.client.api import SkaldClient
from skald.runtime.client.loop_thread import LoopThread


class SyncSkaldClient:
    """The same client for code without an event loop: a private loop on a daemon thread runs
    every call; methods and their results are those of `SkaldClient`."""

    def __init__(self, servers: str | list[str], *, prefix: str = "skald", account: str | None = None,
                 user: str | None = None, agent: str | None = None, peer: str | None = None,
                 api_key: str | None = None, timeout_s: float = 30.0, retries: bool = True) -> None:
        self._loop = LoopThread("skald-client")
        self._client: SkaldClient = self._run(SkaldClient.connect(
            servers, prefix=prefix, account=account, user=user, agent=agent, peer=peer, api_key=api_key,
            timeout_s=timeout_s, retries=retries))

    def _run(self, coro: Any) -> Any:
        return self._loop.run(coro)

    def __getattr__(self, name: str) -> Any:
        """The async client's plain attributes (its prefix, its last index sequence)."""
        return getattr(self._client, name)

    def close(self) -> None:
        """Close the connection and stop the client's event loop thread."""
        self._run(self._client.close())
        self._loop.close()

    def __enter__(self) -> SyncSkaldClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _blocking(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """`SkaldClient.<name>` run on the client's loop; its signature and docstring kept, so `help()`,
    `dir()` and completion show it."""

    @functools.wraps(method)
    def call(self: SyncSkaldClient, *args: Any, **kw: Any) -> Any:
        return self._run(getattr(self._client, name)(*args, **kw))

    return call


for _name, _method in inspect.getmembers(SkaldClient, inspect.iscoroutinefunction):
    if not _name.startswith("_") and _name not in ("connect", "close", "__aenter__", "__aexit__"):
        setattr(SyncSkaldClient, _name, _blocking(_name, _method))
