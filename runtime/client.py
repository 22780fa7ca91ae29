"""The Python client: typed calls over NATS request/reply, typed exceptions, read-your-writes.

    async with await SkaldClient.connect("nats://127.0.0.1:4222", user="alice") as sk:
        await sk.call("fs.write", {"uri": "viking://~/resources/a.md", "content": "..."})
        hits = await sk.call("search.find", {"query": "..."})

The client remembers the highest index sequence its writes were acknowledged with and sends it
on every later request, so a find right after a write sees that write.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from skald.messages import context as X
from skald.messages import errors as E
from skald.messages import fs as F
from skald.messages import ingest as I
from skald.messages import search as Q
from skald.messages import sessions as M
from skald.messages import system as Y
from skald.messages.catalog import OPS
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


async def _quiet(e: Exception) -> None:
    """nats-py logs connection errors itself; callers get them as exceptions instead."""


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
    async def connect(cls, servers: str | list[str], *, prefix: str = "skald", **kw: Any) -> SkaldClient:
        """Connect to one NATS URL or a cluster (a list, or URLs joined by commas)."""
        urls = servers.split(",") if isinstance(servers, str) else servers
        nc = await nats.connect(servers=urls, connect_timeout=2, allow_reconnect=True, max_reconnect_attempts=5,
                                error_cb=_quiet)
        return cls(nc, prefix, owns_connection=True, **kw)

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

    # ----- typed methods: one per public operation, returning the messages/ Structs -------

    async def request(self, op: str, req: msgspec.Struct, *, timeout_s: float | None = None) -> Any:
        """Send a request Struct; decode the result into the catalog's result Struct."""
        result = await self.call(op, req, timeout_s=timeout_s)
        typ = OPS[op].result
        return msgspec.convert(result, typ) if typ is not None else result

    async def find(self, query: str = "", **kw: Any) -> Q.FindResult:
        return await self.request("search.find", Q.FindRequest(query=query, **kw))  # type: ignore[no-any-return]

    async def search(self, query: str = "", **kw: Any) -> Q.FindResult:
        """`search` in list mode (ranked hits, with a query plan when a session is given)."""
        out = await self.request("search.search", Q.SearchRequest(query=query, **kw))
        return msgspec.convert(out, Q.FindResult)

    async def context(self, query: str, **kw: Any) -> X.ContextResult:
        """`search` in context mode: one ready-to-inject block under a token budget."""
        out = await self.request("search.search", Q.SearchRequest(query=query, mode="context", **kw),
                                 timeout_s=deadline_for("search.search", kw, self.timeout_s))
        return msgspec.convert(out, X.ContextResult)

    async def bootstrap(self, **kw: Any) -> X.ContextResult:
        out = await self.request("search.search", Q.SearchRequest(mode="bootstrap", **kw))
        return msgspec.convert(out, X.ContextResult)

    async def recall(self, query: str, **kw: Any) -> X.ContextResult:
        return await self.request("search.recall", Q.RecallRequest(query=query, **kw),  # type: ignore[no-any-return]
                                  timeout_s=deadline_for("search.recall", kw, self.timeout_s))

    async def grep(self, uri: str, pattern: str, **kw: Any) -> Q.GrepResult:
        return await self.request("search.grep", Q.GrepRequest(uri=uri, pattern=pattern, **kw))  # type: ignore[no-any-return]

    async def glob(self, pattern: str, **kw: Any) -> Q.GlobResult:
        return await self.request("search.glob", Q.GlobRequest(pattern=pattern, **kw))  # type: ignore[no-any-return]

    async def read(self, uri: str, **kw: Any) -> F.ReadResult:
        return await self.request("fs.read", F.ReadRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def ls(self, uri: str, **kw: Any) -> F.LsResult:
        return await self.request("fs.ls", F.LsRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def tree(self, uri: str, **kw: Any) -> F.TreeResult:
        return await self.request("fs.tree", F.TreeRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def stat(self, uri: str) -> F.StatResult:
        return await self.request("fs.stat", F.StatRequest(uri=uri))  # type: ignore[no-any-return]

    async def abstract(self, uri: str) -> F.TextResult:
        return await self.request("fs.abstract", F.AbstractRequest(uri=uri))  # type: ignore[no-any-return]

    async def overview(self, uri: str) -> F.TextResult:
        return await self.request("fs.overview", F.AbstractRequest(uri=uri))  # type: ignore[no-any-return]

    async def write(self, uri: str, content: str, **kw: Any) -> F.WriteResult:
        return await self.request("fs.write", F.WriteRequest(uri=uri, content=content, **kw))  # type: ignore[no-any-return]

    async def mkdir(self, uri: str, **kw: Any) -> F.ChangeResult:
        return await self.request("fs.mkdir", F.MkdirRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def rm(self, uri: str, **kw: Any) -> F.ChangeResult:
        return await self.request("fs.rm", F.RmRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def mv(self, from_uri: str, to_uri: str, **kw: Any) -> F.ChangeResult:
        return await self.request("fs.mv", F.MvRequest(from_uri=from_uri, to_uri=to_uri, **kw))  # type: ignore[no-any-return]

    async def add_resource(self, **kw: Any) -> I.IngestResult:
        return await self.request("resources.add", I.AddResourceRequest(**kw))  # type: ignore[no-any-return]

    async def add_skill(self, **kw: Any) -> I.IngestResult:
        return await self.request("skills.add", I.AddSkillRequest(**kw))  # type: ignore[no-any-return]

    async def remember(self, category: str, content: str, **kw: Any) -> I.IngestResult:
        """Write an explicit memory (events, entities, preferences, experiences, ...)."""
        return await self.request("memories.write", I.WriteMemoryRequest(category=category, content=content, **kw))  # type: ignore[no-any-return]

    async def session_create(self, session_id: str | None = None) -> M.SessionInfo:
        return await self.request("sessions.create", M.CreateRequest(session_id=session_id))  # type: ignore[no-any-return]

    async def session_get(self, session_id: str) -> M.SessionInfo:
        return await self.request("sessions.get", M.SessionRef(session_id=session_id))  # type: ignore[no-any-return]

    async def session_list(self, limit: int = 100) -> M.SessionList:
        return await self.request("sessions.list", M.ListRequest(limit=limit))  # type: ignore[no-any-return]

    async def session_delete(self, session_id: str) -> M.DeleteResult:
        return await self.request("sessions.delete", M.SessionRef(session_id=session_id))  # type: ignore[no-any-return]

    async def add_message(self, session_id: str, role: str, text: str | None = None, *,
                          parts: list[Any] | None = None, **kw: Any) -> M.AddMessageResult:
        """Append a message; `text` is shorthand for one text part."""
        if parts is None:
            parts = [M.TextPart(text=text or "")]
        else:
            parts = [msgspec.convert(p, M.Part) if isinstance(p, dict) else p for p in parts]
        return await self.request("sessions.add_message",  # type: ignore[no-any-return]
                                  M.AddMessageRequest(session_id=session_id, role=role, parts=parts, **kw))  # type: ignore[arg-type]

    async def commit(self, session_id: str, **kw: Any) -> M.CommitResult:
        return await self.request("sessions.commit", M.CommitRequest(session_id=session_id, **kw),  # type: ignore[no-any-return]
                                  timeout_s=max(self.timeout_s, 300.0) if kw.get("wait") else None)

    async def session_context(self, session_id: str) -> M.ContextResult:
        return await self.request("sessions.context", M.ContextRequest(session_id=session_id))  # type: ignore[no-any-return]

    async def archives(self, session_id: str) -> M.ArchivesResult:
        return await self.request("sessions.archives", M.SessionRef(session_id=session_id))  # type: ignore[no-any-return]

    async def health(self) -> Y.HealthResult:
        return await self.request("system.health", Y.Empty())  # type: ignore[no-any-return]

    async def stats(self) -> Y.StatsResult:
        return await self.request("system.stats", Y.Empty())  # type: ignore[no-any-return]


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
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> SyncSkaldClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
