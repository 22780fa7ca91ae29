"""The Python client: typed calls over NATS request/reply, typed exceptions, read-your-writes.

    async with await SkaldClient.connect("nats://127.0.0.1:4222", user="alice") as sk:
        await sk.call("fs.write", {"uri": "viking://~/resources/a.md", "content": "..."})
        hits = await sk.call("search.find", {"query": "..."})

The client remembers the highest index sequence its writes were acknowledged with and sends it
on every later request, so a find right after a write sees that write.
"""

from __future__ import annotations

from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from messages import errors as E
from messages.envelope import (
    CONTENT_TYPE,
    H_ACCOUNT,
    H_AGENT,
    H_API_KEY,
    H_INDEX_SEQ,
    H_PEER,
    H_TIMEOUT_MS,
    H_USER,
    MSGPACK,
)


class Response(msgspec.Struct, kw_only=True):
    status: str
    result: Any = None
    error: dict[str, Any] | None = None


_dec = msgspec.json.Decoder(Response)
_mdec = msgspec.msgpack.Decoder(Response)


REWRITE_DEADLINE_S = 65.0  # outlasts the server's 30 s rewrite fuse plus retrieval (seed 003 bug 13)


def deadline_for(op: str, body: Any, default_s: float) -> float:
    """A context request that asks for a digest waits past the server's rewrite fuse: giving up
    inside the fuse would throw away the rendered block the server returns even when it fails."""
    rewrite = body.get("rewrite") if isinstance(body, dict) else getattr(body, "rewrite", None)
    if op in ("search.search", "search.recall") and rewrite not in (None, False) and isinstance(rewrite, (bool, str)):
        return max(default_s, REWRITE_DEADLINE_S)
    return default_s


class SkaldClient:
    def __init__(self, nc: NATS, prefix: str = "skald", *, account: str | None = None, user: str | None = None,
                 agent: str | None = None, peer: str | None = None, api_key: str | None = None,
                 timeout_s: float = 30.0, owns_connection: bool = False) -> None:
        self.nc = nc
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.index_seq = 0
        self._owns = owns_connection
        self.headers = {k: v for k, v in ((H_ACCOUNT, account), (H_USER, user), (H_AGENT, agent),
                                          (H_PEER, peer), (H_API_KEY, api_key)) if v}

    @classmethod
    async def connect(cls, servers: str | list[str], **kw: Any) -> SkaldClient:
        urls = servers.split(",") if isinstance(servers, str) else servers
        nc = await nats.connect(servers=urls, connect_timeout=2, allow_reconnect=True, max_reconnect_attempts=5)
        return cls(nc, owns_connection=True, **kw)

    def as_identity(self, **kw: Any) -> SkaldClient:
        """Another identity over the same connection."""
        other = SkaldClient(self.nc, self.prefix, timeout_s=self.timeout_s, **kw)
        return other

    async def __aenter__(self) -> SkaldClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns:
            await self.nc.drain()

    async def raw(self, op: str, body: bytes, headers: dict[str, str] | None = None,
                  timeout_s: float | None = None) -> tuple[Response, dict[str, str]]:
        """Send bytes as they are; return the decoded envelope and the reply headers."""
        t = timeout_s or self.timeout_s
        hdrs = {**self.headers, H_TIMEOUT_MS: str(int(t * 1000))}
        if self.index_seq:
            hdrs[H_INDEX_SEQ] = str(self.index_seq)
        hdrs.update(headers or {})
        try:
            msg = await self.nc.request(f"{self.prefix}.v1.{op}", body, timeout=t + 0.5, headers=hdrs)
        except NoRespondersError as e:
            raise E.Unavailable(f"no worker serves {op}") from e
        except NatsTimeout as e:
            raise E.DeadlineExceeded(f"no reply to {op} within {t}s") from e
        rh = msg.headers or {}
        resp = (_mdec if rh.get(CONTENT_TYPE, "").startswith(MSGPACK) else _dec).decode(msg.data)
        return resp, rh

    async def call(self, op: str, body: dict[str, Any] | msgspec.Struct | None = None, *,
                   msgpack: bool = False, timeout_s: float | None = None) -> Any:
        """Call an operation; return its `result` or raise the typed error it answered with."""
        payload = body if body is not None else {}
        if timeout_s is None:
            timeout_s = deadline_for(op, payload, self.timeout_s)
        if msgpack:
            data, extra = msgspec.msgpack.encode(payload), {CONTENT_TYPE: MSGPACK}
        else:
            data, extra = msgspec.json.encode(payload), {}
        resp, _ = await self.raw(op, data, extra, timeout_s)
        if resp.status != "ok":
            err = resp.error or {}
            raise E.from_wire(str(err.get("code", "INTERNAL")), str(err.get("message", "")), err.get("details"))
        res = resp.result
        if isinstance(res, dict) and isinstance(res.get("index_seq"), int):
            self.index_seq = max(self.index_seq, res["index_seq"])
        return res
