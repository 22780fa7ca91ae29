"""The Python client: typed calls over NATS request/reply, typed exceptions, read-your-writes.

    async with await SkaldClient.connect("nats://127.0.0.1:4222", user="alice") as sk:
        await sk.call("fs.write", {"uri": "viking://~/resources/a.md", "content": "..."})
        hits = await sk.call("search.find", {"query": "..."})

The client remembers the highest index sequence its writes were acknowledged with and sends it
on every later request, so a find right after a write sees that write.

Why one module: it is one typed method per public operation over one `call`; splitting the
methods by area would scatter a table that is read as a whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from skald.messages import catalog, errors, folders
from skald.messages import context as context_msgs
from skald.messages import fs as fs_msgs
from skald.messages import ingest as ingest_msgs
from skald.messages import search as search_msgs
from skald.messages import sessions as session_msgs
from skald.messages import system as system_msgs
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
    status: str
    result: Any = None
    error: dict[str, Any] | None = None


_dec = msgspec.json.Decoder(Response)
_mdec = msgspec.msgpack.Decoder(Response)


UPLOAD_PIECE_BYTES = 256 * 1024  # base64 in JSON stays well under NATS's 1 MB payload
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


class SkaldClient:
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
    async def connect(cls, servers: str | list[str], *, prefix: str = "skald", **kw: Any) -> SkaldClient:
        """Connect to one NATS URL or a cluster (a list, or URLs joined by commas)."""
        urls = servers.split(",") if isinstance(servers, str) else servers
        key = kw.get("api_key")
        # With a key, the connection logs in as the key's own bus user and receives its replies on
        # its private inbox prefix (a server without authorization ignores the login).
        seen: list[str] = []

        async def on_error(e: Exception) -> None:
            seen[:] = [*seen[-4:], str(e)]  # nats-py reports why a server refused only here

        limit = float(kw.get("timeout_s") or 30.0)  # connecting counts against the caller's timeout too
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
        if not self._owns or self.nc.is_closed:
            return
        with contextlib.suppress(Exception):  # reconnecting (a revoked key, a server gone): no drain
            await self.nc.drain()
        if not self.nc.is_closed:  # a drain refused or cut short mid-reconnect leaves it open: close
            await self.nc.close()

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

    async def request(self, op: Op, req: msgspec.Struct, *, timeout_s: float | None = None) -> Any:
        """Send a request Struct; decode the result into the catalog's result Struct."""
        result = await self.call(op, req, timeout_s=timeout_s)
        typ = op.result
        return msgspec.convert(result, typ) if typ is not None else result

    async def find(self, query: str = "", **kw: Any) -> search_msgs.FindResult:
        return await self.request(catalog.SEARCH_FIND, search_msgs.FindRequest(query=query, **kw))  # type: ignore[no-any-return]

    async def search(self, query: str = "", **kw: Any) -> search_msgs.FindResult:
        """`search` in list mode (ranked hits, with a query plan when a session is given)."""
        out = await self.request(catalog.SEARCH_SEARCH, search_msgs.SearchRequest(query=query, **kw))
        return msgspec.convert(out, search_msgs.FindResult)

    async def context(self, query: str, **kw: Any) -> context_msgs.ContextResult:
        """`search` in context mode: one ready-to-inject block under a token budget."""
        out = await self.request(catalog.SEARCH_SEARCH, search_msgs.SearchRequest(query=query, mode="context", **kw),
                                 timeout_s=deadline_for(catalog.SEARCH_SEARCH.name, kw, self.timeout_s))
        return msgspec.convert(out, context_msgs.ContextResult)

    async def bootstrap(self, **kw: Any) -> context_msgs.ContextResult:
        out = await self.request(catalog.SEARCH_SEARCH, search_msgs.SearchRequest(mode="bootstrap", **kw))
        return msgspec.convert(out, context_msgs.ContextResult)

    async def recall(self, query: str, **kw: Any) -> context_msgs.ContextResult:
        return await self.request(catalog.SEARCH_RECALL, search_msgs.RecallRequest(query=query, **kw),  # type: ignore[no-any-return]
                                  timeout_s=deadline_for(catalog.SEARCH_RECALL.name, kw, self.timeout_s))

    async def grep(self, uri: str, pattern: str, **kw: Any) -> search_msgs.GrepResult:
        return await self.request(catalog.SEARCH_GREP, search_msgs.GrepRequest(uri=uri, pattern=pattern, **kw))  # type: ignore[no-any-return]

    async def glob(self, pattern: str, **kw: Any) -> search_msgs.GlobResult:
        return await self.request(catalog.SEARCH_GLOB, search_msgs.GlobRequest(pattern=pattern, **kw))  # type: ignore[no-any-return]

    async def read(self, uri: str, **kw: Any) -> fs_msgs.ReadResult:
        return await self.request(catalog.FS_READ, fs_msgs.ReadRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def ls(self, uri: str, **kw: Any) -> fs_msgs.LsResult:
        return await self.request(catalog.FS_LS, fs_msgs.LsRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def tree(self, uri: str, **kw: Any) -> fs_msgs.TreeResult:
        return await self.request(catalog.FS_TREE, fs_msgs.TreeRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def stat(self, uri: str) -> fs_msgs.StatResult:
        return await self.request(catalog.FS_STAT, fs_msgs.StatRequest(uri=uri))  # type: ignore[no-any-return]

    async def abstract(self, uri: str) -> fs_msgs.TextResult:
        return await self.request(catalog.FS_ABSTRACT, fs_msgs.AbstractRequest(uri=uri))  # type: ignore[no-any-return]

    async def overview(self, uri: str) -> fs_msgs.TextResult:
        return await self.request(catalog.FS_OVERVIEW, fs_msgs.AbstractRequest(uri=uri))  # type: ignore[no-any-return]

    async def write(self, uri: str, content: str, **kw: Any) -> fs_msgs.WriteResult:
        return await self.request(catalog.FS_WRITE, fs_msgs.WriteRequest(uri=uri, content=content, **kw))  # type: ignore[no-any-return]

    async def mkdir(self, uri: str, **kw: Any) -> fs_msgs.ChangeResult:
        return await self.request(catalog.FS_MKDIR, fs_msgs.MkdirRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def rm(self, uri: str, **kw: Any) -> fs_msgs.ChangeResult:
        return await self.request(catalog.FS_RM, fs_msgs.RmRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def mv(self, from_uri: str, to_uri: str, **kw: Any) -> fs_msgs.ChangeResult:
        return await self.request(catalog.FS_MV, fs_msgs.MvRequest(from_uri=from_uri, to_uri=to_uri, **kw))  # type: ignore[no-any-return]

    async def add_resource(self, *, upload: str | Path | None = None, **kw: Any) -> ingest_msgs.IngestResult:
        """`resources.add`; `upload=<local file or folder>` sends its files first (what the server
        would import from it: `.gitignore` and `include`/`exclude` honoured), so no server path
        permission is needed."""
        if upload is not None:
            kw["upload_id"] = await self.upload(upload, include=kw.get("include"), exclude=kw.get("exclude"))
        return await self.request(catalog.RESOURCES_ADD, ingest_msgs.AddResourceRequest(**kw))  # type: ignore[no-any-return]

    async def upload(self, path: str | Path, *, include: list[str] | None = None,
                     exclude: list[str] | None = None) -> str:
        """Send a local file or folder piece by piece; returns the upload id `resources.add` takes."""
        root = Path(path)
        if not root.exists():
            raise errors.NotFound("no such local path", {"path": str(path)})
        rels = await asyncio.to_thread(folders.select, root, include, exclude)
        if not rels:
            raise errors.InvalidArgument("nothing to upload (every file is ignored or excluded)", {"path": str(path)})
        uid: str | None = None
        for rel in rels:
            data = await asyncio.to_thread((root if root.is_file() else root / rel).read_bytes)
            dest = rel if root.is_file() else f"{root.resolve().name}/{rel}"
            offset = 0
            while True:
                piece = data[offset : offset + UPLOAD_PIECE_BYTES]
                r = await self.request(catalog.RESOURCES_UPLOAD, ingest_msgs.UploadRequest(
                    path=dest, data=piece, upload_id=uid, offset=offset))
                uid, offset = r.upload_id, offset + len(piece)
                if offset >= len(data):
                    break
        assert uid is not None
        return uid

    async def set_tags(self, uri: str, tags: list[str], **kw: Any) -> ingest_msgs.SetTagsResult:
        """Replace (or `mode="add"` / `"remove"`) a file's k=v tags."""
        return await self.request(catalog.CONTENT_SET_TAGS, ingest_msgs.SetTagsRequest(uri=uri, tags=tags, **kw))  # type: ignore[no-any-return]

    async def reindex(self, uri: str, **kw: Any) -> ingest_msgs.ReindexResult:
        """Embed a file or subtree again with the workers' current embedder."""
        return await self.request(catalog.CONTENT_REINDEX, ingest_msgs.ReindexRequest(uri=uri, **kw))  # type: ignore[no-any-return]

    async def add_skill(self, **kw: Any) -> ingest_msgs.IngestResult:
        return await self.request(catalog.SKILLS_ADD, ingest_msgs.AddSkillRequest(**kw))  # type: ignore[no-any-return]

    async def remember(self, category: str, content: str, **kw: Any) -> ingest_msgs.IngestResult:
        """Write an explicit memory (events, entities, preferences, experiences, ...)."""
        return await self.request(catalog.MEMORIES_WRITE, ingest_msgs.WriteMemoryRequest(category=category,
                                                                                         content=content, **kw))  # type: ignore[no-any-return]

    async def update_memory(self, uri: str, content: str, **kw: Any) -> ingest_msgs.IngestResult:
        """Replace a memory's text; the old text stays in its history."""
        return await self.request(catalog.MEMORIES_UPDATE,  # type: ignore[no-any-return]
                                  ingest_msgs.UpdateMemoryRequest(uri=uri, content=content, **kw))

    async def forget(self, uri: str, **kw: Any) -> fs_msgs.ChangeResult:
        """Delete a memory (its versions are kept)."""
        return await self.request(catalog.MEMORIES_DELETE, ingest_msgs.MemoryRef(uri=uri, **kw))  # type: ignore[no-any-return]

    async def memory_history(self, uri: str) -> ingest_msgs.MemoryHistory:
        return await self.request(catalog.MEMORIES_HISTORY, ingest_msgs.MemoryRef(uri=uri))  # type: ignore[no-any-return]

    async def session_create(self, session_id: str | None = None,
                             auto_commit: session_msgs.AutoCommit | None = None) -> session_msgs.SessionInfo:
        """Create a session (or set an existing one's auto-commit policy)."""
        return await self.request(catalog.SESSIONS_CREATE, session_msgs.CreateRequest(  # type: ignore[no-any-return]
            session_id=session_id, auto_commit=auto_commit))

    async def session_get(self, session_id: str) -> session_msgs.SessionInfo:
        return await self.request(catalog.SESSIONS_GET, session_msgs.SessionRef(session_id=session_id))  # type: ignore[no-any-return]

    async def session_list(self, limit: int = 100) -> session_msgs.SessionList:
        return await self.request(catalog.SESSIONS_LIST, session_msgs.ListRequest(limit=limit))  # type: ignore[no-any-return]

    async def session_delete(self, session_id: str) -> session_msgs.DeleteResult:
        return await self.request(catalog.SESSIONS_DELETE, session_msgs.SessionRef(session_id=session_id))  # type: ignore[no-any-return]

    async def add_message(self, session_id: str, role: str, text: str | None = None, *,
                          parts: list[Any] | None = None, **kw: Any) -> session_msgs.AddMessageResult:
        """Append a message; `text` is shorthand for one text part."""
        if not kw.get("id") and not kw.get("request_id"):
            kw["request_id"] = uuid.uuid4().hex  # so a retry after a lost reply cannot store it twice
        if parts is None:
            parts = [session_msgs.TextPart(text=text or "")]
        else:
            parts = [msgspec.convert(p, session_msgs.Part) if isinstance(p, dict) else p for p in parts]
        return await self.request(catalog.SESSIONS_ADD_MESSAGE,  # type: ignore[no-any-return]
                                  session_msgs.AddMessageRequest(session_id=session_id, role=role, parts=parts, **kw))  # type: ignore[arg-type]

    async def commit(self, session_id: str, **kw: Any) -> session_msgs.CommitResult:
        return await self.request(catalog.SESSIONS_COMMIT, session_msgs.CommitRequest(session_id=session_id, **kw),  # type: ignore[no-any-return]
                                  timeout_s=max(self.timeout_s, 300.0) if kw.get("wait") else None)

    async def session_context(self, session_id: str, max_tokens: int | None = None) -> session_msgs.ContextResult:
        """Overview + live messages; with `max_tokens`, the newest whole steps that fit."""
        return await self.request(catalog.SESSIONS_CONTEXT,  # type: ignore[no-any-return]
                                  session_msgs.ContextRequest(session_id=session_id, max_tokens=max_tokens))

    async def retry_archive(self, session_id: str, archive_id: str) -> session_msgs.ArchiveInfo:
        """Run a failed or quarantined archive's Phase 2 again."""
        return await self.request(catalog.SESSIONS_RETRY_ARCHIVE,  # type: ignore[no-any-return]
                                  session_msgs.RetryArchiveRequest(session_id=session_id, archive_id=archive_id))

    async def used(self, session_id: str, uris: list[str], request_id: str | None = None) -> session_msgs.UsedResult:
        """Report what the agent used of what it was given: each node's use count goes up by one."""
        return await self.request(catalog.SESSIONS_USED, session_msgs.UsedRequest(  # type: ignore[no-any-return]
            session_id=session_id, uris=uris, request_id=request_id or uuid.uuid4().hex))

    async def archives(self, session_id: str) -> session_msgs.ArchivesResult:
        return await self.request(catalog.SESSIONS_ARCHIVES, session_msgs.SessionRef(session_id=session_id))  # type: ignore[no-any-return]

    async def health(self) -> system_msgs.HealthResult:
        return await self.request(catalog.SYSTEM_HEALTH, system_msgs.Empty())  # type: ignore[no-any-return]

    async def stats(self) -> system_msgs.StatsResult:
        return await self.request(catalog.SYSTEM_STATS, system_msgs.Empty())

    async def whoami(self) -> system_msgs.WhoAmIResult:
        """Who this client acts as (a key's pinned account and user), and its account's event token."""
        return await self.request(catalog.SYSTEM_WHOAMI, system_msgs.Empty())  # type: ignore[no-any-return]


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
