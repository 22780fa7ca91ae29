"""The OpenViking-compatible HTTP gateway: `/api/v1/...` routes mapped one-to-one onto NATS
subjects, with OpenViking's envelope (`{"status": "ok", "result": ...}` or
`{"status": "error", "error": {code, message, details}}`) and status codes.

Most routes pass the JSON body through untouched and answer with the reply's bytes as they
came off the bus (the NATS envelope is the HTTP envelope), so the gateway adds a parse of the
headers and nothing else. Query-string routes (GET, DELETE) are converted through the request
Struct, and the session routes take their id from the path and accept OpenViking's message
shape (`content` as a shorthand for one text part).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
from aiohttp import BodyPartReader, web
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from skald.messages import catalog, errors
from skald.messages import ingest as ingest_msgs
from skald.messages import sessions as session_msgs
from skald.messages.catalog import OPS
from skald.messages.envelope import (
    H_ACCOUNT,
    H_AGENT,
    H_API_KEY,
    H_DEPRECATION,
    H_INDEX_SEQ,
    H_PEER,
    H_STATUS,
    H_USER,
)
from skald.runtime import __version__
from skald.runtime.client import replies, tracing
from skald.runtime.client.api import SkaldClient
from skald.runtime.client.login import key_digest
from skald.runtime.client.transport import UPLOAD_PIECE_BYTES, deadline_for
from skald.runtime.doors.gateway_compat import (
    HTTP_STATUS,
    ISO_TIMES,
    add_compat_routes,
    error_response,
    iso_times,
    message_body,
    resource_body,
    unsupported,
)
from skald.runtime.doors.gateway_routes import ROUTES, Route
from skald.runtime.doors.gateway_skills import add_skill_routes
from skald.runtime.doors.openapi import openapi

IDENTITY = (("X-OpenViking-Account", H_ACCOUNT), ("X-OpenViking-User", H_USER),
            ("X-OpenViking-Agent", H_AGENT), ("X-OpenViking-Actor-Peer", H_PEER))
_enc = msgspec.json.Encoder()
RECONNECT_RETRY_MS = 2000  # the hint while the gateway's NATS connection is down (nats-py retries every 2 s)


class _Seq(msgspec.Struct):
    """The one field of a write's reply the gateway reads: the index sequence it was acknowledged at."""

    index_seq: int = 0


class _SeqReply(msgspec.Struct):
    result: _Seq | None = None


_seq_of = msgspec.json.Decoder(_SeqReply)
# The operations whose replies carry the index sequence a later read must see (read-your-writes).
SEQUENCED = frozenset(op.name for op in OPS.values()
                      if op.result is not None and "index_seq" in getattr(op.result, "__struct_fields__", ()))


# Request latency buckets, in seconds: the workers' own (`skald.runtime.host.metrics`), so a dashboard
# puts the HTTP hop and the actors' handling on one scale (a unit test keeps the two equal).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


class KeyCheck(Protocol):
    """What the gateway needs of the workers' keys file (`skald.runtime.bus.keys.KeyStore`): whether
    keys are on, and the record a presented key matches (None: no match)."""

    enabled: bool

    def authenticate(self, presented: str | None) -> object | None: ...


Local = Callable[[str, bytes, dict[str, str]], Awaitable[tuple[bytes, dict[str, str]] | None]]


class Gateway:
    """With keys (the same keys file the workers read), an HTTP request needs a valid key, and
    what it forwards goes over that key's own bus connection (its bus identity and private inbox);
    without keys, over the gateway's one connection."""

    def __init__(self, client: SkaldClient, keys: KeyCheck | None = None, servers: list[str] | None = None,
                 local: Local | None = None) -> None:
        self.client = client
        self.local = local  # the actors' host when the gateway runs in their process (`skald up --http-port`)
        self.keys = keys if keys is not None and keys.enabled else None
        self.servers = servers or []
        self._conns: dict[str, SkaldClient] = {}  # per key digest
        # The highest index sequence a write through this gateway was acknowledged at, passed on with
        # every request so a search after `wait: true` (or any write) sees it, as a client's would.
        self.index_seq = 0
        self._opening: dict[str, asyncio.Lock] = {}
        self.registry = CollectorRegistry()
        self.http_requests = Counter("skald_gateway_requests", "HTTP requests by method, route and status.",
                                     ["method", "route", "status"], registry=self.registry)
        self.http_seconds = Histogram("skald_gateway_request_seconds", "HTTP request latency by method and route.",
                                      ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry)

    async def close(self) -> None:
        for c in self._conns.values():
            with contextlib.suppress(Exception):
                await c.close()
        self._conns.clear()

    async def _bus(self, key: str | None) -> SkaldClient:
        """The connection a request goes out on: the key's own (opened on first use, reopened when
        the server closed it), or the shared one without keys."""
        if self.keys is None or key is None:
            return self.client
        d = key_digest(key)
        conn = self._conns.get(d)
        if conn is not None and not conn.nc.is_closed:
            return conn
        async with self._opening.setdefault(d, asyncio.Lock()):
            conn = self._conns.get(d)
            if conn is None or conn.nc.is_closed:
                conn = await SkaldClient.connect(self.servers, prefix=self.client.prefix, api_key=key,
                                                 timeout_s=self.client.timeout_s)
                self._conns[d] = conn
            return conn

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024, middlewares=[self._measure])
        for r in ROUTES:
            if r.kind != "compat":
                app.router.add_route(r.method, r.path, self._handler(r))
        app.router.add_get("/health", self._health)
        app.router.add_get("/openapi.json", self._openapi)
        app.router.add_get("/metrics", self._metrics)
        add_compat_routes(app, self)
        add_skill_routes(app, self)
        return app

    @web.middleware
    async def _measure(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Requests by route template and status, and their latency, for `/metrics`."""
        t0 = time.perf_counter()
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        status = 500
        try:
            with tracing.serve(f"{request.method} {route}", request.headers, route=route) as span:
                response = await handler(request)
                status = response.status
                if span is not None:
                    span.set_attribute("http.response.status_code", status)
            return response
        except web.HTTPException as e:
            status = e.status
            if e.status in (404, 405):  # an unknown route or method: the same JSON envelope as the rest
                why = unsupported(request.path) if e.status == 404 else None  # OpenViking's, not Skald's
                code = "UNIMPLEMENTED" if why else "NOT_FOUND" if e.status == 404 else "INVALID_ARGUMENT"
                status = 501 if why else e.status
                response = error_response(code, f"{request.method} {request.path}: "
                                          f"{f'Skald has no {why}' if why else e.reason}", {"see": "/openapi.json"})
                response.set_status(status)
                return response
            raise
        finally:
            self.http_requests.labels(request.method, route, str(status)).inc()
            self.http_seconds.labels(request.method, route).observe(time.perf_counter() - t0)

    async def _metrics(self, request: web.Request) -> web.Response:
        """With keys on, any valid key (Prometheus sends one from its `authorization` block): the
        counts say who is busy when. The API's description (/openapi.json) and liveness (/health)
        stay open, as they hold nothing of anyone's."""
        if not self._authorised(self._key(request)):
            return error_response("UNAUTHENTICATED", "/metrics needs a valid X-API-Key or Authorization: Bearer key")
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # ----- request plumbing --------------------------------------------------------------

    def _key(self, request: web.Request) -> str | None:
        key = request.headers.get("X-API-Key")
        auth = request.headers.get("Authorization", "")
        if not key and auth.lower().startswith("bearer "):
            key = auth[7:].strip()
        return key or None

    def _authorised(self, key: str | None) -> bool:
        """Against the workers' keys file (constant time, every record compared)."""
        return self.keys is None or self.keys.authenticate(key) is not None

    def _headers(self, request: web.Request, key: str | None) -> dict[str, str]:
        out = {dst: v for src, dst in IDENTITY if (v := request.headers.get(src))}
        if key:
            out[H_API_KEY] = key
        return out

    async def _forward(self, op: str, body: bytes, headers: dict[str, str], timeout_s: float) -> web.Response:
        hdrs = {**headers, "Skald-Timeout-Ms": str(int(timeout_s * 1000))}
        if self.index_seq:
            hdrs[H_INDEX_SEQ] = str(self.index_seq)
        tracing.inject(hdrs)
        # In the actors' own process an operation they serve skips the bus: the host checks the
        # key itself, as it would a bus request's.
        got = await self.local(op, body, hdrs) if self.local is not None else None
        if got is None:
            try:
                bus = await self._bus(headers.get(H_API_KEY))
                if not bus.nc.is_connected:  # reconnecting: nats-py would hold the request until its deadline
                    return self._bus_down()
                resp_msg = await replies.of(bus.nc).request(f"{self.client.prefix}.v1.{op}", body, timeout_s + 0.5,
                                                            headers=hdrs)  # the connection's one reply inbox
            except errors.SkaldError as e:
                return error_response(e.code, e.message)
            except NoRespondersError:
                return error_response("UNAVAILABLE", f"no worker serves {op}")
            except NatsTimeout:
                return error_response("DEADLINE_EXCEEDED", f"no reply to {op} within {timeout_s}s")
            got = (resp_msg.data, resp_msg.headers or {})
        data, hdrs = got
        status = HTTP_STATUS.get(hdrs.get(H_STATUS, "OK"), 500)
        if op in SEQUENCED and status == 200:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                got_seq = _seq_of.decode(data).result
                self.index_seq = max(self.index_seq, got_seq.index_seq if got_seq else 0)
        if op in ISO_TIMES and status == 200:
            data = _enc.encode(iso_times(json.loads(data)))
        out = web.Response(body=data, status=status, content_type="application/json")
        if hdrs.get(H_DEPRECATION):
            out.headers["Deprecation"] = hdrs[H_DEPRECATION]
        return out

    def _handler(self, route: Route) -> Callable[[web.Request], Awaitable[web.Response]]:
        op = OPS[route.op]

        async def handle(request: web.Request) -> web.Response:
            key = self._key(request)
            if not self._authorised(key):
                return error_response("UNAUTHENTICATED", "a valid X-API-Key or Authorization: Bearer key is required")
            headers = self._headers(request, key)
            timeout = self.client.timeout_s
            try:
                if route.kind == "upload":
                    return await self._upload(request, headers)
                if route.kind == "resource":
                    parsed = json.loads(await request.read() or b"{}")
                    if not isinstance(parsed, dict):
                        raise ValueError("body must be a JSON object")
                    body = _enc.encode(resource_body(parsed))
                    timeout = max(timeout, 600.0) if parsed.get("wait") else timeout
                elif route.kind == "body":
                    body = await request.read()
                    if route.op in (catalog.SEARCH_SEARCH.name, catalog.SEARCH_RECALL.name) and b'"rewrite"' in body:
                        with_json = json.loads(body or b"{}")
                        timeout = deadline_for(route.op, with_json, timeout)
                elif route.kind == "query":
                    # OpenViking's clients send their whole parameter set (`simple`, `output`, ...) on
                    # every GET: query parameters this operation does not take are ignored (and named in
                    # a header), as HTTP servers do; JSON bodies stay strict.
                    known = set(op.request.__struct_fields__)
                    params: dict[str, Any] = {k: v for k, v in request.query.items() if k in known}
                    ignored = sorted(k for k in request.query if k not in known)
                    body = _enc.encode(msgspec.convert(params, op.request, strict=False))
                    if ignored:
                        response = await self._forward(route.op, body, headers, timeout)
                        response.headers["X-Skald-Ignored-Params"] = ",".join(ignored)
                        return response
                else:
                    body = await self._session_body(route, request, headers)
                    if isinstance(body, web.Response):
                        return body
            except (msgspec.ValidationError, ValueError) as e:
                return error_response("INVALID_ARGUMENT", str(e))
            if route.op == catalog.SESSIONS_COMMIT.name:
                timeout = max(timeout, 300.0)
            return await self._forward(route.op, body, headers, timeout)

        return handle

    async def _upload(self, request: web.Request, headers: dict[str, str]) -> web.Response:
        """OpenViking's temp_upload: the multipart file, streamed on in pieces; its upload id back."""
        reader = await request.multipart()
        bus = await self._bus(headers.get(H_API_KEY))
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader) or not part.filename:
                continue
            # OpenViking's CLI zips a folder into a temporary file named like `.tmpAb12Cd.zip`: a
            # hidden name, which the tree refuses, so the leading dots go.
            name = part.filename.replace("\\", "/").rsplit("/", 1)[-1].lstrip(".") or "upload"
            uid: str | None = None
            offset = 0
            while True:
                piece = bytearray()
                while len(piece) < UPLOAD_PIECE_BYTES and (chunk := await part.read_chunk(UPLOAD_PIECE_BYTES)):
                    piece += chunk
                if not piece and offset:
                    break
                try:
                    r = await bus.request(catalog.RESOURCES_UPLOAD, ingest_msgs.UploadRequest(
                        path=name, data=bytes(piece), upload_id=uid, offset=offset))
                except errors.SkaldError as e:
                    return error_response(e.code, e.message, e.details)
                uid, offset = r.upload_id, offset + len(piece)
                if len(piece) < UPLOAD_PIECE_BYTES:
                    break
            return web.json_response({"status": "ok", "result": {"temp_file_id": uid, "size": offset}})
        return error_response("INVALID_ARGUMENT", "the multipart body holds no file")

    async def _session_body(self, route: Route, request: web.Request, headers: dict[str, str]) -> Any:
        sid = request.match_info["session_id"]
        data: dict[str, Any] = {}
        if request.method == "POST" and request.can_read_body:
            raw = await request.read()
            parsed = json.loads(raw) if raw.strip() else {}
            if not isinstance(parsed, dict):
                raise ValueError("body must be a JSON object")
            data = parsed
        if route.op == catalog.SESSIONS_ADD_MESSAGE.name:
            return _enc.encode(message_body(sid, data))
        if route.op == catalog.SESSIONS_COMMIT.name:
            known = set(session_msgs.CommitRequest.__struct_fields__)
            return _enc.encode({**{k: v for k, v in data.items() if k in known}, "session_id": sid})
        if route.op == catalog.SESSIONS_USED.name:
            # OpenViking's body names them `contexts` (URIs, or objects with a `uri`).
            given = data.get("uris", data.get("contexts", []))
            uris = [c.get("uri") if isinstance(c, dict) else c for c in given] if isinstance(given, list) else given
            extra = {"request_id": data["request_id"]} if "request_id" in data else {}
            return _enc.encode({"session_id": sid, "uris": uris, **extra})
        if route.op == catalog.SESSIONS_GET.name and request.query.get("auto_create", "").lower() in ("1", "true"):
            got = await self._forward(catalog.SESSIONS_GET.name, _enc.encode({"session_id": sid}), headers,
                                      self.client.timeout_s)
            if got.status != 404:
                return got
            return await self._forward(catalog.SESSIONS_CREATE.name, _enc.encode({"session_id": sid}), headers,
                                       self.client.timeout_s)
        return _enc.encode({"session_id": sid})

    def _bus_down(self) -> web.Response:
        """What a request gets while the gateway has no bus connection: 503 at once, with the
        retry hint, rather than a wait for a deadline no worker can meet."""
        out = error_response("UNAVAILABLE", "the gateway has lost its NATS connection and is reconnecting",
                             {"retry_after_ms": RECONNECT_RETRY_MS})
        out.headers["Retry-After"] = str(RECONNECT_RETRY_MS // 1000)
        return out

    async def _health(self, request: web.Request) -> web.Response:
        """Liveness of what the gateway needs: its NATS connection (503 while it reconnects)."""
        if not self.client.nc.is_connected:
            return web.json_response({"status": "unavailable", "version": __version__, "bus": "disconnected"},
                                     status=503)
        return web.json_response({"status": "ok", "version": __version__, "bus": "connected"})

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi(ROUTES))


async def serve(client: SkaldClient, host: str, port: int, keys: KeyCheck | None = None,
                servers: list[str] | None = None, local: Local | None = None) -> web.AppRunner:
    """Serve until `runner.cleanup()`, which also closes the per-key connections. `local`: the
    actors' host of this process (`ActorHost.request_local`), for operations served without the bus."""
    gw = Gateway(client, keys, servers, local)
    app = gw.app()
    app.on_cleanup.append(lambda _app: gw.close())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
