"""The client for code without an event loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

from skald.runtime.client.api import SkaldClient


class SyncSkaldClient:
    """The same client for code without an event loop: a private loop on a daemon thread runs
    every call; methods and their results are those of `SkaldClient`."""

    def __init__(self, servers: str | list[str], **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="skald-client", daemon=True)
        self._thread.start()
        self._client: SkaldClient = self._run(SkaldClient.connect(servers, **kw))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            return self._run(attr(*args, **kw))

        return call

    def close(self) -> None:
        """Close the connection and stop the client's event loop thread."""
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> SyncSkaldClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
