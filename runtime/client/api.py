"""The Python client agent hosts import: one typed method per public operation, each with the
operation's fields as explicit parameters and its reply as a `skald.messages` Struct.

    async with await SkaldClient.connect("nats://127.0.0.1:4222", user="alice") as sk:
        await sk.write("viking://~/resources/a.md", "...")
        hits = await sk.find("how are backups verified?")

`call(op, body)` reaches any operation by name with a JSON-shaped body (what the CLI and the HTTP
gateway use); the transport's rules (deadlines, retries, read-your-writes) are `transport.py`.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, Literal, overload

import msgspec

from skald.messages import catalog, errors, folders
from skald.messages import context as context_msgs
from skald.messages import fs as fs_msgs
from skald.messages import ingest as ingest_msgs
from skald.messages import search as search_msgs
from skald.messages import sessions as session_msgs
from skald.messages import system as system_msgs
from skald.runtime.client.transport import UPLOAD_PIECE_BYTES, Transport, deadline_for

INGEST_WAIT_S = 600.0  # how long an add waits for its job by default (the server's own limit)


def _given(args: dict[str, Any]) -> dict[str, Any]:
    """A typed method's parameters as its request's fields (`locals()` at the method's start)."""
    return {k: v for k, v in args.items() if k != "self"}


class SkaldClient(Transport):
    """Typed calls to a Skald deployment (connect with `await SkaldClient.connect(url)`)."""

    async def find(self, query: str = "", *, image_url: str | list[str] | None = None,
                   target_uri: str | list[str] = "", events_time_decay_protection: str | None = None,
                   context_type: str | list[str] | None = None, tags: list[str] | None = None, limit: int = 10,
                   node_limit: int | None = None, score_threshold: float | None = None,
                   filter: dict[str, Any] | None = None, since: str | None = None, until: str | None = None,
                   time_field: Literal["updated_at", "created_at"] = "updated_at",
                   level: int | str | list[int] | None = None, include_provenance: bool = False,
                   read_content: bool = False, telemetry: bool | dict[str, Any] = False) -> search_msgs.FindResult:
        """Ranked hits (memories, resources, skills) for a query; no budget, no assembly."""
        return await self.request(catalog.SEARCH_FIND, search_msgs.FindRequest(**_given(locals())))

    @overload
    async def search(self, query: str = "", *, mode: Literal["list"] = "list",
                     **params: Any) -> search_msgs.FindResult: ...

    @overload
    async def search(self, query: str = "", *, mode: Literal["context", "bootstrap"],
                     **params: Any) -> context_msgs.ContextResult: ...

    async def search(self, query: str = "", *, mode: Literal["list", "context", "bootstrap"] = "list",
                     image_url: str | list[str] | None = None,
                     target_uri: str | list[str] = "", events_time_decay_protection: str | None = None,
                     context_type: str | list[str] | None = None, tags: list[str] | None = None, limit: int = 10,
                     node_limit: int | None = None, score_threshold: float | None = None,
                     filter: dict[str, Any] | None = None, since: str | None = None, until: str | None = None,
                     time_field: Literal["updated_at", "created_at"] = "updated_at",
                     level: int | str | list[int] | None = None, include_provenance: bool = False,
                     read_content: bool = False, telemetry: bool | dict[str, Any] = False,
                     search_type: Literal["semantic", "keywords", "hybrid"] = "semantic",
                     session_id: str | None = None, score_gte: bool = False,
                     **assembly: Any) -> search_msgs.FindResult | context_msgs.ContextResult:
        """`search`, as on the wire: `mode="list"` (the default) gives ranked hits, planned from the
        session's context when a session is given; `mode="context"` is `context()` (one block under a
        token budget, its parameters such as `max_tokens` taken here too) and `mode="bootstrap"` is
        `bootstrap()`. The reply's type follows the mode."""
        args = _given(locals())
        del args["mode"], args["assembly"]
        if mode == "context":
            return await self.context(**args, **assembly)
        if mode == "bootstrap":
            if query:
                raise errors.InvalidArgument("mode='bootstrap' takes no query: it builds the session-start block")
            return await self.bootstrap(session_id=session_id, telemetry=telemetry, **assembly)
        if mode != "list":
            raise errors.InvalidArgument(f"mode must be 'list', 'context' or 'bootstrap', not {mode!r}")
        return msgspec.convert(await self.request(catalog.SEARCH_SEARCH,
                                                  search_msgs.SearchRequest(**args, **assembly)),
                               search_msgs.FindResult)

    async def context(self, query: str = "", *, image_url: str | list[str] | None = None,
                      target_uri: str | list[str] = "", events_time_decay_protection: str | None = None,
                      context_type: str | list[str] | None = None, tags: list[str] | None = None, limit: int = 10,
                      node_limit: int | None = None, score_threshold: float | None = None,
                      filter: dict[str, Any] | None = None, since: str | None = None, until: str | None = None,
                      time_field: Literal["updated_at", "created_at"] = "updated_at",
                      level: int | str | list[int] | None = None, include_provenance: bool = False,
                      read_content: bool = False, telemetry: bool | dict[str, Any] = False,
                      search_type: Literal["semantic", "keywords", "hybrid"] = "semantic",
                      session_id: str | None = None, score_gte: bool = False,
                      query_expansion: Literal["off", "auto"] | msgspec.UnsetType = msgspec.UNSET,
                      max_tokens: int | msgspec.UnsetType = msgspec.UNSET,
                      quotas: dict[str, int] | None | msgspec.UnsetType = msgspec.UNSET,
                      purpose: Literal["chat", "coding"] | None | msgspec.UnsetType = msgspec.UNSET,
                      detail: str | dict[str, str] | None | msgspec.UnsetType = msgspec.UNSET,
                      dedup_turns: int | msgspec.UnsetType = msgspec.UNSET,
                      exclude_uris: list[str] | msgspec.UnsetType = msgspec.UNSET,
                      peer_scope: Literal["actor", "all"] | msgspec.UnsetType = msgspec.UNSET,
                      other_peer_penalty: float | dict[str, float] | msgspec.UnsetType = msgspec.UNSET,
                      rewrite: bool | Literal["auto"] | msgspec.UnsetType = msgspec.UNSET,
                      rewrite_max_bullets: int | msgspec.UnsetType = msgspec.UNSET) -> context_msgs.ContextResult:
        """`search` in context mode: one ready-to-inject block under a token budget."""
        args = _given(locals())
        out = await self.request(catalog.SEARCH_SEARCH, search_msgs.SearchRequest(mode="context", **args),
                                 timeout_s=deadline_for(catalog.SEARCH_SEARCH.name, args, self.timeout_s))
        return msgspec.convert(out, context_msgs.ContextResult)

    async def bootstrap(self, *, session_id: str | None = None,
                        max_tokens: int | msgspec.UnsetType = msgspec.UNSET,
                        detail: str | dict[str, str] | None | msgspec.UnsetType = msgspec.UNSET,
                        dedup_turns: int | msgspec.UnsetType = msgspec.UNSET,
                        exclude_uris: list[str] | msgspec.UnsetType = msgspec.UNSET,
                        rewrite: bool | Literal["auto"] | msgspec.UnsetType = msgspec.UNSET,
                        rewrite_max_bullets: int | msgspec.UnsetType = msgspec.UNSET,
                        telemetry: bool | dict[str, Any] = False) -> context_msgs.ContextResult:
        """`search` in bootstrap mode: the session-start block (profile, working set, continuity,
        instructions), with no query and no search."""
        args = _given(locals())
        out = await self.request(catalog.SEARCH_SEARCH, search_msgs.SearchRequest(mode="bootstrap", **args),
                                 timeout_s=deadline_for(catalog.SEARCH_SEARCH.name, args, self.timeout_s))
        return msgspec.convert(out, context_msgs.ContextResult)

    async def recall(self, query: str = "", *, image_url: str | list[str] | None = None,
                     target_uri: str | list[str] = "", events_time_decay_protection: str | None = None,
                     context_type: str | list[str] | None = None, tags: list[str] | None = None, limit: int = 10,
                     node_limit: int | None = None, score_threshold: float | None = None,
                     filter: dict[str, Any] | None = None, since: str | None = None, until: str | None = None,
                     time_field: Literal["updated_at", "created_at"] = "updated_at",
                     level: int | str | list[int] | None = None, include_provenance: bool = False,
                     read_content: bool = False, telemetry: bool | dict[str, Any] = False,
                     search_type: Literal["semantic", "keywords", "hybrid"] = "semantic",
                     session_id: str | None = None, score_gte: bool = False,
                     query_expansion: Literal["off", "auto"] | msgspec.UnsetType = msgspec.UNSET,
                     max_tokens: int | msgspec.UnsetType = msgspec.UNSET,
                     quotas: dict[str, int] | None | msgspec.UnsetType = msgspec.UNSET,
                     purpose: Literal["chat", "coding"] | None | msgspec.UnsetType = msgspec.UNSET,
                     detail: str | dict[str, str] | None | msgspec.UnsetType = msgspec.UNSET,
                     dedup_turns: int | msgspec.UnsetType = msgspec.UNSET,
                     exclude_uris: list[str] | msgspec.UnsetType = msgspec.UNSET,
                     peer_scope: Literal["actor", "all"] | msgspec.UnsetType = msgspec.UNSET,
                     other_peer_penalty: float | dict[str, float] | msgspec.UnsetType = msgspec.UNSET,
                     rewrite: bool | Literal["auto"] | msgspec.UnsetType = msgspec.UNSET,
                     rewrite_max_bullets: int | msgspec.UnsetType = msgspec.UNSET,
                     max_chars: int | msgspec.UnsetType = msgspec.UNSET,
                     min_score: float | msgspec.UnsetType = msgspec.UNSET,
                     render: bool | Literal["full", "compact"] | msgspec.UnsetType = msgspec.UNSET,
                     ) -> context_msgs.ContextResult:
        """The auto-recall preset of context mode (its own defaults; v1 field names accepted)."""
        args = _given(locals())
        return await self.request(catalog.SEARCH_RECALL, search_msgs.RecallRequest(**args),
                                  timeout_s=deadline_for(catalog.SEARCH_RECALL.name, args, self.timeout_s))

    async def grep(self, uri: str, pattern: str, *, case_insensitive: bool = False, node_limit: int = 256,
                   exclude_uri: str | None = None, level_limit: int = 10, tags: list[str] | None = None,
                   include_tags: bool = False, before_context: int = 0,
                   after_context: int = 0) -> search_msgs.GrepResult:
        """Lines matching a pattern in the files under a URI."""
        return await self.request(catalog.SEARCH_GREP, search_msgs.GrepRequest(**_given(locals())))

    async def glob(self, pattern: str, *, uri: str = "viking://", node_limit: int = 256,
                   extra_fields: list[str] | None = None, tags: list[str] | None = None,
                   include_tags: bool = False) -> search_msgs.GlobResult:
        """Paths under a URI matching a glob pattern (`**` for any depth)."""
        return await self.request(catalog.SEARCH_GLOB, search_msgs.GlobRequest(**_given(locals())))

    async def read(self, uri: str, *, offset: int = 0, limit: int = -1, raw: bool = False) -> fs_msgs.ReadResult:
        """A file's text (a document's converted text; `raw` for its bytes), optionally a line range."""
        return await self.request(catalog.FS_READ, fs_msgs.ReadRequest(**_given(locals())))

    async def ls(self, uri: str, *, recursive: bool = False, show_hidden: bool = False,
                 node_limit: int = 1000) -> fs_msgs.LsResult:
        """A directory's entries."""
        return await self.request(catalog.FS_LS, fs_msgs.LsRequest(**_given(locals())))

    async def tree(self, uri: str, *, level_limit: int = 3, node_limit: int = 1000,
                   show_hidden: bool = False) -> fs_msgs.TreeResult:
        """A directory's tree, to `level_limit` levels."""
        return await self.request(catalog.FS_TREE, fs_msgs.TreeRequest(**_given(locals())))

    async def write(self, uri: str, content: str, *, mode: Literal["replace", "append", "create"] = "replace",
                    wait: bool = True) -> fs_msgs.WriteResult:
        """Write a file (replace, append or create) and index it."""
        return await self.request(catalog.FS_WRITE, fs_msgs.WriteRequest(**_given(locals())))

    async def mkdir(self, uri: str, *, parents: bool = True) -> fs_msgs.ChangeResult:
        """Create a directory."""
        return await self.request(catalog.FS_MKDIR, fs_msgs.MkdirRequest(**_given(locals())))

    async def rm(self, uri: str, *, recursive: bool = False, wait: bool = True) -> fs_msgs.ChangeResult:
        """Remove a file, or a directory with `recursive`."""
        return await self.request(catalog.FS_RM, fs_msgs.RmRequest(**_given(locals())))

    async def mv(self, from_uri: str, to_uri: str, *, wait: bool = True) -> fs_msgs.ChangeResult:
        """Move a file or directory (its rows move with it)."""
        return await self.request(catalog.FS_MV, fs_msgs.MvRequest(**_given(locals())))

    async def set_tags(self, uri: str, tags: list[str], *, mode: Literal["replace", "add", "remove"] = "replace",
                       wait: bool = True) -> ingest_msgs.SetTagsResult:
        """Replace (or `mode="add"` / `"remove"`) a file's k=v tags."""
        return await self.request(catalog.CONTENT_SET_TAGS, ingest_msgs.SetTagsRequest(**_given(locals())))

    async def reindex(self, uri: str, *, mode: Literal["vectors_only"] = "vectors_only", wait: bool = True,
                      recursive: bool = True, force: bool = False) -> ingest_msgs.ReindexResult:
        """Embed a file or subtree again with the workers' current embedder."""
        return await self.request(catalog.CONTENT_REINDEX, ingest_msgs.ReindexRequest(**_given(locals())))

    async def add_skill(self, *, path: str | None = None, content: str | None = None, upload_id: str | None = None,
                        dry_run: bool = False, scope: Literal["agent", "user"] = "agent",
                        tags: list[str] | None = None, wait: bool = True) -> ingest_msgs.IngestResult:
        """Add a skill (a SKILL.md with `name` and `description` frontmatter, or its folder); by
        default the reply comes once it is findable (`wait=False`: at once, `status="queued"`)."""
        return await self.request(catalog.SKILLS_ADD, ingest_msgs.AddSkillRequest(**_given(locals())),
                                  timeout_s=max(self.timeout_s, INGEST_WAIT_S) if wait else None)

    async def remember(self, category: str, content: str, *, name: str | None = None, tags: list[str] | None = None,
                       wait: bool = True) -> ingest_msgs.IngestResult:
        """Write an explicit memory (events, entities, preferences, experiences, ...)."""
        return await self.request(catalog.MEMORIES_WRITE, ingest_msgs.WriteMemoryRequest(**_given(locals())))

    async def update_memory(self, uri: str, content: str, *, wait: bool = True) -> ingest_msgs.IngestResult:
        """Replace a memory's text; the old text stays in its history."""
        return await self.request(catalog.MEMORIES_UPDATE, ingest_msgs.UpdateMemoryRequest(**_given(locals())))

    async def forget(self, uri: str, *, wait: bool = True) -> fs_msgs.ChangeResult:
        """Delete a memory (its versions are kept)."""
        return await self.request(catalog.MEMORIES_DELETE, ingest_msgs.MemoryRef(**_given(locals())))

    async def add_resource(self, *, upload: str | Path | None = None, path: str | None = None,
                           content: str | None = None, url: str | None = None, upload_id: str | None = None,
                           name: str | None = None, target_uri: str | None = None, include: list[str] | None = None,
                           exclude: list[str] | None = None, keep_missing: bool = False,
                           tags: list[str] | None = None, reason: str = "",
                           wait: bool = True) -> ingest_msgs.IngestResult:
        """`resources.add`; `upload=<local file or folder>` sends its files first (what the server
        would import from it: `.gitignore` and `include`/`exclude` honoured), so no server path
        permission is needed. By default the reply comes once the resource is findable, as the CLI
        waits; `wait=False` returns at once with the queued job (`job()` follows it)."""
        args = _given(locals())
        if (local := args.pop("upload")) is not None:
            args["upload_id"] = await self.upload(local, include=include, exclude=exclude)
        return await self.request(catalog.RESOURCES_ADD, ingest_msgs.AddResourceRequest(**args),
                                  timeout_s=max(self.timeout_s, INGEST_WAIT_S) if wait else None)

    async def job(self, job_id: str, *, wait: bool = False) -> ingest_msgs.IngestResult:
        """`resources.job`: an ingest job's outcome (done or failed, with its counts), or `queued`
        while it runs; with `wait`, until it ends or the client's deadline."""
        return await self.request(catalog.RESOURCES_JOB, ingest_msgs.JobRef(job_id=job_id, wait=wait))

    async def commit(self, session_id: str, *, keep_recent_count: int | None = None,
                     retention_mode: Literal["turn_budget"] | None = None, keep_recent_turn_count: int | None = None,
                     retained_message_token_budget: int | None = None, min_raw_tail_steps: int | None = None,
                     wait: bool = False) -> session_msgs.CommitResult:
        """Commit a session: Phase 1 (archive, durable) now; with `wait`, the reply waits for Phase 2."""
        return await self.request(catalog.SESSIONS_COMMIT, session_msgs.CommitRequest(**_given(locals())),
                                  timeout_s=max(self.timeout_s, 300.0) if wait else None)


    async def stat(self, uri: str) -> fs_msgs.StatResult:
        """Size, times and kind of a node."""
        return await self.request(catalog.FS_STAT, fs_msgs.StatRequest(uri=uri))

    async def abstract(self, uri: str) -> fs_msgs.TextResult:
        """A node's L0 abstract (a directory's `.abstract.md`, a file's summary)."""
        return await self.request(catalog.FS_ABSTRACT, fs_msgs.AbstractRequest(uri=uri))

    async def overview(self, uri: str) -> fs_msgs.TextResult:
        """A node's L1 overview (a directory's `.overview.md`, a document's table of contents)."""
        return await self.request(catalog.FS_OVERVIEW, fs_msgs.AbstractRequest(uri=uri))

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
            local = root if root.is_file() else root / rel
            dest = rel if root.is_file() else f"{root.resolve().name}/{rel}"
            size = local.stat().st_size
            with local.open("rb") as f:  # piece by piece: a file over the server's limit is never read whole
                offset = 0
                while True:
                    piece = await asyncio.to_thread(f.read, UPLOAD_PIECE_BYTES)
                    r = await self.request(catalog.RESOURCES_UPLOAD, ingest_msgs.UploadRequest(
                        path=dest, data=piece, upload_id=uid, offset=offset, size=size if offset == 0 else None))
                    uid, offset = r.upload_id, offset + len(piece)
                    if r.refused is not None or offset >= size or not piece:
                        break  # refused (too large: the add reports it) or sent whole
        assert uid is not None
        return uid

    async def memory_history(self, uri: str) -> ingest_msgs.MemoryHistory:
        """Every earlier version of a memory, oldest first."""
        return await self.request(catalog.MEMORIES_HISTORY, ingest_msgs.MemoryRef(uri=uri))

    async def session_create(self, session_id: str | None = None,
                             auto_commit: session_msgs.AutoCommit | None = None) -> session_msgs.SessionInfo:
        """Create a session (or set an existing one's auto-commit policy)."""
        return await self.request(catalog.SESSIONS_CREATE, session_msgs.CreateRequest(
            session_id=session_id, auto_commit=auto_commit))

    async def session_get(self, session_id: str) -> session_msgs.SessionInfo:
        """A session's counters (live messages, total, commits)."""
        return await self.request(catalog.SESSIONS_GET, session_msgs.SessionRef(session_id=session_id))

    async def session_list(self, limit: int = 100) -> session_msgs.SessionList:
        """The caller's sessions."""
        return await self.request(catalog.SESSIONS_LIST, session_msgs.ListRequest(limit=limit))

    async def session_delete(self, session_id: str) -> session_msgs.DeleteResult:
        """Delete a session with its archives."""
        return await self.request(catalog.SESSIONS_DELETE, session_msgs.SessionRef(session_id=session_id))

    async def add_message(self, session_id: str, role: Literal["user", "assistant"], text: str | None = None, *,
                          parts: list[session_msgs.Part | dict[str, Any]] | None = None, id: str | None = None,
                          turn_id: str | None = None, message_kind: session_msgs.MessageKind | None = None,
                          source_message_ids: list[str] | None = None,
                          request_id: str | None = None) -> session_msgs.AddMessageResult:
        """Append a message; `text` is shorthand for one text part. Without an `id` or `request_id`,
        one is made up, so a retry after a lost reply cannot store the message twice."""
        if not id and not request_id:
            request_id = uuid.uuid4().hex
        typed: list[session_msgs.Part] = (
            [session_msgs.TextPart(text=text or "")] if parts is None else
            [msgspec.convert(p, session_msgs.Part) if isinstance(p, dict) else p for p in parts])
        return await self.request(catalog.SESSIONS_ADD_MESSAGE, session_msgs.AddMessageRequest(
            session_id=session_id, role=role, parts=typed, id=id, turn_id=turn_id,
            message_kind=message_kind, source_message_ids=source_message_ids,
            request_id=request_id))

    async def session_context(self, session_id: str, max_tokens: int | None = None) -> session_msgs.ContextResult:
        """Overview + live messages; with `max_tokens`, the newest whole steps that fit."""
        return await self.request(catalog.SESSIONS_CONTEXT,
                                  session_msgs.ContextRequest(session_id=session_id, max_tokens=max_tokens))

    async def retry_archive(self, session_id: str, archive_id: str) -> session_msgs.ArchiveInfo:
        """Run a failed or quarantined archive's Phase 2 again."""
        return await self.request(catalog.SESSIONS_RETRY_ARCHIVE,
                                  session_msgs.RetryArchiveRequest(session_id=session_id, archive_id=archive_id))

    async def used(self, session_id: str, uris: list[str], request_id: str | None = None) -> session_msgs.UsedResult:
        """Report what the agent used of what it was given: each node's use count goes up by one."""
        return await self.request(catalog.SESSIONS_USED, session_msgs.UsedRequest(
            session_id=session_id, uris=uris, request_id=request_id or uuid.uuid4().hex))

    async def archives(self, session_id: str) -> session_msgs.ArchivesResult:
        """Each archive of a session with its state (pending, completed, failed, quarantined)."""
        return await self.request(catalog.SESSIONS_ARCHIVES, session_msgs.SessionRef(session_id=session_id))

    async def health(self) -> system_msgs.HealthResult:
        """The answering worker's identity, actors and their health."""
        return await self.request(catalog.SYSTEM_HEALTH, system_msgs.Empty())

    async def stats(self) -> system_msgs.StatsResult:
        """Index size, replica lag, retrieval counters and stream depths."""
        return await self.request(catalog.SYSTEM_STATS, system_msgs.Empty())

    async def whoami(self) -> system_msgs.WhoAmIResult:
        """Who this client acts as (a key's pinned account and user), and its account's event token."""
        return await self.request(catalog.SYSTEM_WHOAMI, system_msgs.Empty())
