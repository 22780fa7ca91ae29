"""JSON over HTTP to model servers (embeddings, chat, rerank): one keep-alive connection pool per
event loop, bodies encoded and decoded by msgspec.

aiohttp rather than httpx: on this machine a loopback POST to an embeddings server costs 2.6 ms
through httpx's AsyncClient and 1.0 ms through aiohttp (same server, same run, `bench/
vs_openviking.py`), and every find and context request makes one. aiohttp (Apache-2.0) is already
the gateway's server; its sockets are TCP_NODELAY.
"""

from __future__ import annotations

import asyncio
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    import aiohttp

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_open: weakref.WeakSet[JsonClient] = weakref.WeakSet()  # closed by a stopping worker (close_all)


def _aiohttp() -> ModuleType:
    """aiohttp, imported when the first client is made, which is when a worker that has a model
    server is built: a worker whose models are all offline never pays its import (0.27 s, most of
    it TLS contexts built as its connector module loads), and no request waits on it."""
    import aiohttp

    return aiohttp


class HTTPStatusError(Exception):
    """The server answered an error status; `status`, `headers` and the body's first bytes kept."""

    def __init__(self, url: str, status: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__(f"HTTP {status} from {url}: {body[:200].decode('utf-8', 'replace')}")
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body


class TransportError(Exception):
    """No answer: refused, reset, or the attempt's own timeout."""


class AttemptTimeout(TransportError):
    """The attempt ran out of its time."""


class Response(msgspec.Struct, frozen=True):
    """An HTTP response as read: status, headers and body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return _decode(self.body)

    def raise_for_status(self, url: str) -> None:
        if self.status >= 400:
            raise HTTPStatusError(url, self.status, self.headers, self.body)


class JsonClient:
    """POSTs JSON with fixed headers. The session is made on first use inside the running loop
    (aiohttp binds a session to its loop) and made again if a later call runs in another loop."""

    def __init__(self, headers: dict[str, str] | None = None, pool: int = 32) -> None:
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.pool = pool
        _aiohttp()  # here, at start-up, not on the first request
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            http = _aiohttp()
            self._session = http.ClientSession(
                connector=http.TCPConnector(limit=self.pool, keepalive_timeout=30),
                headers=self.headers)
            self._loop = loop
            _open.add(self)
        return self._session

    async def post(self, url: str, body: Any, timeout_s: float) -> Response:
        http = _aiohttp()
        try:
            async with self._get().post(url, data=_encode(body),
                                        timeout=http.ClientTimeout(total=timeout_s)) as r:
                raw = await r.read()
                return Response(r.status, {k.lower(): v for k, v in r.headers.items()}, raw)
        except TimeoutError as e:  # aiohttp's timeouts are TimeoutErrors too
            raise AttemptTimeout(f"no answer from {url} within {timeout_s:.2f}s") from e
        except (http.ClientError, OSError) as e:
            raise TransportError(f"{type(e).__name__} from {url}: {e}") from e

    async def close(self) -> None:
        if self._session is not None and not self._session.closed and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None


async def close_all() -> None:
    """Close every client session of the running loop (a worker stopping): no connection is left
    for the garbage collector to complain about."""
    for c in list(_open):
        await c.close()
