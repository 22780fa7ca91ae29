"""The client's transport: one identity's requests over a NATS connection, with deadlines, retries
of retry-safe operations, typed errors and read-your-writes. The client remembers the highest index
sequence its writes were acknowledged with and sends it on every later request, so a find right
after a write sees that write."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any, Self, TypeVar

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from skald.messages import catalog, errors
from skald.messages.catalog import Op
from skald.messages.envelope import (
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
from skald.runtime.client import replies, tracing
from skald.runtime.client.login import client_login


class Response(msgspec.Struct, kw_only=True):
    """A reply envelope as the client reads it: status, result, error."""

    status: str
    result: Any = None
    error: dict[str, Any] | None = None


_dec = msgspec.json.Decoder(Response)
_mdec = msgspec.msgpack.Decoder(Response)


UPLOAD_PIECE_BYTES = 256 * 1024  # base64 in JSON stays well under NATS's 1 MB payload
# Closes asked of a connection a reconnect attempt keeps reopening (`close`), CLOSE_PAUSE_S apart
# after the first: three back to back were not enough on a loaded machine (a CI run beside two
# benchmarks left a revoked key's client reconnecting after its close).
CLOSE_TRIES = 20
CLOSE_PAUSE_S = 0.05
ATTEMPT_FLOOR_S = 2.0  # a retried request's attempt waits at least this long for its reply
# Outlasts the server's 30 s rewrite fuse plus retrieval (docs/design/context-assembly.md, finding 13).
REWRITE_DEADLINE_S = 65.0


def deadline_for(op: str, body: Any, default_s: float) -> float:
    """A context request that asks for a digest waits past the server's rewrite fuse: giving up
    inside the fuse would throw away the rendered block the server returns even when it fails."""
    rewrite = body.get("rewrite") if isinstance(body, dict) else getattr(body, "rewrite", None)
    context_op = op in (catalog.SEARCH_SEARCH.name, catalog.SEARCH_RECALL.name)
    if context_op and rewrite not in (None, False) and isinstance(rewrite, (bool, str)):
        return max(default_s, REWRITE_DEADLINE_S)
    return default_s


R = TypeVar("R")


class Transport:
    """One identity's calls over a NATS connection: deadlines, retries of retry-safe operations,
    typed errors, and the index sequence a later read waits for."""

    def __init__(self, nc: NATS, prefix: str = "skald", *, account: str | None = None, user: str | None = None,
                 agent: str | None = None, peer: str | None = None, api_key: str | None = None,
                 timeout_s: float = 30.0, owns_connection: bool = False, retries: bool = True) -> None:
        self.nc = nc
        self._replies = replies.of(nc)  # the connection's reply inbox, shared with its other clients
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.retries = retries  # retry-safe operations are retried within the deadline (see `call`)
        self.retried = 0
        self.index_seq = 0
        self._owns = owns_connection
        self.headers = {k: v for k, v in ((H_ACCOUNT, account), (H_USER, user), (H_AGENT, agent),
                                          (H_PEER, peer), (H_API_KEY, api_key)) if v}

    @classmethod
    async def connect(cls, servers: str | list[str], *, prefix: str = "skald", account: str | None = None,
                      user: str | None = None, agent: str | None = None, peer: str | None = None,
                      api_key: str | None = None, timeout_s: float = 30.0, retries: bool = True) -> Self:
        """Connect to one NATS URL or a cluster (a list, or URLs joined by commas), acting as the
        identity given (with keys on, the key decides the account and user)."""
        urls = servers.split(",") if isinstance(servers, str) else servers
        key = api_key
        # With a key, the connection logs in as the key's own bus user and receives its replies on
        # its private inbox prefix (a server without authorization ignores the login).
        seen: list[str] = []

        async def on_error(e: Exception) -> None:
            seen[:] = [*seen[-4:], str(e)]  # nats-py reports why a server refused only here

        limit = float(timeout_s or 30.0)  # connecting counts against the caller's timeout too
        hint = f"cannot reach NATS at {','.join(urls)}: is `skald up` running?"
        try:
            nc = await asyncio.wait_for(nats.connect(
                servers=urls, connect_timeout=min(2.0, limit), allow_reconnect=True, max_reconnect_attempts=5,
                reconnect_time_wait=0.5, error_cb=on_error, **(client_login(key) if key else {})), limit)
        except TimeoutError as e:
            raise errors.Unavailable(f"{hint} (no connection within {limit:g}s)") from e
        except (nats.errors.Error, OSError) as e:
            if any("authorization violation" in m.lower() for m in (*seen, str(e))):
                raise errors.Unauthenticated("the bus refused this connection: a valid API key is required") from e
            raise errors.Unavailable(hint) from e
        # A first connection gives up soon (a CLI call to a server that is not there fails fast);
        # once connected, a client rides out any outage: a restarted nats-server is found again,
        # and calls made meanwhile fail with their own deadline, not a connection closed for good.
        nc.options["max_reconnect_attempts"] = -1
        return cls(nc, prefix, account=account, user=user, agent=agent, peer=peer, api_key=api_key,
                   timeout_s=timeout_s, owns_connection=True, retries=retries)

    def as_identity(self, *, account: str | None = None, user: str | None = None, agent: str | None = None,
                    peer: str | None = None, api_key: str | None = None) -> Self:
        """Another identity over the same connection."""
        return type(self)(self.nc, self.prefix, account=account, user=user, agent=agent, peer=peer,
                          api_key=api_key, timeout_s=self.timeout_s)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Drain and close the connection this client opened (a client sharing another's does nothing)."""
        if not self._owns or self.nc.is_closed:
            return
        with contextlib.suppress(Exception):  # reconnecting (a revoked key, a server gone): no drain
            await self.nc.drain()
        for _ in range(CLOSE_TRIES):  # a drain refused or cut short mid-reconnect leaves it open: close
            if self.nc.is_closed:
                return
            # The server may reset the socket under the close (it closed a revoked key's connection),
            # or be gone with it (the event loop refuses a write to a closed transport): nats-py then
            # raises from flushing its buffer, and the connection is closed all the same. A reconnect
            # attempt running when the close begins can set the status back before it is cancelled
            # (seen once in a test run): the close is asked again.
            with contextlib.suppress(OSError, RuntimeError):
                await self.nc.close()
            if self.nc.is_closed:
                return
            await asyncio.sleep(CLOSE_PAUSE_S)

    async def raw(self, op: Op | str, body: bytes, headers: dict[str, str] | None = None,
                  timeout_s: float | None = None) -> tuple[Response, dict[str, str]]:
        """Send bytes as they are; return the decoded envelope and the reply headers."""
        op = op.name if isinstance(op, Op) else op
        t = timeout_s or self.timeout_s
        hdrs = {**self.headers, H_TIMEOUT_MS: str(int(t * 1000))}
        if self.index_seq:
            hdrs[H_INDEX_SEQ] = str(self.index_seq)
        hdrs.update(headers or {})
        tracing.inject(hdrs)  # the caller's current span, if it has one, parents the trace
        try:
            msg = await self._replies.request(f"{self.prefix}.v1.{op}", body, t + 0.5, hdrs)
        except NoRespondersError as e:
            raise errors.Unavailable(f"no worker serves {op}") from e
        except NatsTimeout as e:
            raise errors.DeadlineExceeded(f"no reply to {op} within {t}s") from e
        rh = msg.headers or {}
        resp = (_mdec if rh.get(CONTENT_TYPE, "").startswith(MSGPACK) else _dec).decode(msg.data)
        return resp, rh

    async def call(self, op: Op | str, body: dict[str, Any] | msgspec.Struct | None = None, *,
                   msgpack: bool = False, timeout_s: float | None = None) -> Any:
        """Call an operation; return its `result` or raise the typed error it answered with.

        A retry-safe operation (`Op.retry_safe`: reads, and adds with an id or idempotency key)
        that answers UNAVAILABLE, or whose reply is lost (a server of the cluster died), is sent
        again with backoff (the server's `retry_after_ms` hint first) for as long as the caller's
        deadline allows; each attempt gets part of what is left, so a lost reply is not waited
        for until the very end."""
        payload = body if body is not None else {}
        op = op.name if isinstance(op, Op) else op
        if timeout_s is None:
            timeout_s = deadline_for(op, payload, self.timeout_s)
        if msgpack:
            data, extra = msgspec.msgpack.encode(payload), {CONTENT_TYPE: MSGPACK}
        else:
            data, extra = msgspec.json.encode(payload), {}
        if op not in catalog.RETRY_SAFE or not self.retries:
            return self._result(await self.raw(op, data, extra, timeout_s))
        end = time.monotonic() + timeout_s
        attempt = 0
        while True:
            attempt += 1
            left = end - time.monotonic()
            try:
                # A digest request's long deadline is the server's fuse plus margin: never cut it.
                attempt_s = left if timeout_s > self.timeout_s else min(left, max(ATTEMPT_FLOOR_S, left / 3))
                return self._result(await self.raw(op, data, extra, attempt_s))
            except (errors.Unavailable, errors.DeadlineExceeded) as e:
                if (e.details or {}).get("reason") == "no_space":
                    raise  # a full disk is not freed in the next few seconds: the caller decides
                hint = (e.details or {}).get("retry_after_ms")
                pause = (float(hint) / 1000 if isinstance(hint, (int, float))
                         else random.uniform(0, min(2.0, 0.1 * 2**attempt)))
                if time.monotonic() + pause + 0.05 >= end:
                    raise
                self.retried += 1
                await asyncio.sleep(pause)

    def _result(self, reply: tuple[Response, dict[str, str]]) -> Any:
        resp = reply[0]
        if resp.status != "ok":
            err = resp.error or {}
            raise errors.from_wire(str(err.get("code", "INTERNAL")), str(err.get("message", "")), err.get("details"))
        res = resp.result
        if isinstance(res, dict) and isinstance(res.get("index_seq"), int):
            self.index_seq = max(self.index_seq, res["index_seq"])
        return res

    # ----- typed methods: one per public operation, returning the messages/ Structs -------

    async def request(self, op: Op[R], req: msgspec.Struct, *, timeout_s: float | None = None) -> R:
        """Send a request Struct; decode the result into the catalog's result Struct."""
        result = await self.call(op, req, timeout_s=timeout_s)
        typ = op.result
        return msgspec.convert(result, typ) if typ is not None else result
