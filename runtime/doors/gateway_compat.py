"""OpenViking's request shapes mapped onto Skald's (add_resource, add_skill, messages), and the
routes that are not one bus operation each: waiting for the queues to drain, the
observer's status pages, the skills listing, and batches of messages. Each is built from the
public operations, through the gateway's own forwarding (so identity and keys apply as usual).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

from skald.messages import catalog
from skald.messages import ingest as ingest_msgs
from skald.messages import sessions as session_msgs

_enc = msgspec.json.Encoder()
HTTP_STATUS = {"OK": 200, "INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403,
               "NOT_FOUND": 404, "CONFLICT": 409, "INTERNAL": 500, "UNIMPLEMENTED": 501, "UNAVAILABLE": 503,
               "DEADLINE_EXCEEDED": 504}


def error_response(code: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    body = {"status": "error", "error": {"code": code, "message": message, **({"details": details} if details else {})}}
    return web.Response(body=_enc.encode(body), status=HTTP_STATUS.get(code, 500), content_type="application/json")
WAIT_MAX_S = 600.0

# OpenViking capabilities Skald does not have, by route prefix, and why: their routes answer 501
# UNIMPLEMENTED (OpenViking's own code, which its clients raise as UnimplementedError) with the
# reason, never a bare 404 that reads like a typo in the client.
UNSUPPORTED: tuple[tuple[str, str], ...] = (
    ("/api/v1/acl", "access control lists: Skald isolates accounts, users and agents, and API keys are "
                    "pinned to them (`skald keys`)"),
    ("/api/v1/admin", "account administration over HTTP: accounts and users come from the keys file "
                      "(`skald keys create`)"),
    ("/api/v1/agent-evolution", "agent-evolution trajectories and outcomes"),
    ("/api/v1/compile", "compiled context bundles: ask `search` with mode=context for a ready block"),
    ("/api/v1/openviking-assets", "OpenViking asset bundles"),
    ("/api/v1/privacy-configs", "privacy configuration stores: keep secrets out of the tree"),
    ("/bot/", "VikingBot chat: Skald is the context engine an agent calls, not an agent"),
    ("/api/v1/pack", ".ovpack import, export, backup and restore: `skald replay record` and `apply` move a "
                     "deployment"),
    ("/api/v1/snapshot", "workspace snapshots: every write is in Skald's journal (`skald replay record`)"),
    ("/api/v1/tasks", "listing or cancelling tasks: get_task answers for one job by the id resources.add "
                      "gives, and `wait: true` blocks until the job is done"),
    ("/api/v1/watches", "watched sources: add the folder or URL again to refresh it"),
    ("/api/v1/system/consistency", "consistency checks: each worker's health reports index lag and staleness "
                                   "(/api/v1/observer/system)"),
    ("/api/v1/observer/filesystem", "filesystem operation counters here: each worker's /metrics counts requests "
                                    "by operation"),
    ("/api/v1/observer/lock", "lock observer: Skald takes no path locks (one owner per session, atomic renames)"),
    ("/api/v1/fs/cp", "copies: write the content again under the new name, or add the source a second time"),
    ("/api/v1/content/batch-write", "batched writes: send each with /api/v1/content/write"),
    ("/api/v1/fs/attrs", "extended attributes: tags are set with content.set_tags"),
    ("/api/v1/sessions/", "this session route: Skald's sessions have messages, commit, context and archives"),
)


OBSERVERS = ["system", "queue", "vikingdb", "models", "retrieval"]
JOB_ID = re.compile(r"[0-9a-f]{32}")
TASK_STATUS = {"queued": "running", "done": "completed", "failed": "failed", "checked": "completed"}


def unsupported(path: str) -> str | None:
    """Why Skald has no such OpenViking route, if it is one of OpenViking's (None: unknown)."""
    return next((why for prefix, why in UNSUPPORTED if path.startswith(prefix)), None)

# OpenViking's session and file routes give times as ISO-8601 strings (its CLI prints them as they come);
# Skald's wire has epoch seconds. The gateway converts these replies' `*_at` numbers.
ISO_TIMES = frozenset({catalog.SESSIONS_LIST.name, catalog.SESSIONS_GET.name, catalog.SESSIONS_CREATE.name,
                       catalog.SESSIONS_ARCHIVES.name, catalog.FS_LS.name, catalog.FS_STAT.name})


def iso_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (datetime.fromtimestamp(v, UTC).isoformat() if k.endswith("_at") and isinstance(v, int | float)
                    and not isinstance(v, bool) else iso_times(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [iso_times(v) for v in value]
    return value



def message_body(sid: str, data: dict[str, Any]) -> dict[str, Any]:
    """OpenViking's message shape -> sessions.add_message: `content` is one text part."""
    known = set(session_msgs.AddMessageRequest.__struct_fields__)
    out = {k: v for k, v in data.items() if k in known}
    if not out.get("parts") and isinstance(data.get("content"), str):
        out["parts"] = [{"type": "text", "text": data["content"]}]
    out["session_id"] = sid
    return out


def resource_body(data: dict[str, Any]) -> dict[str, Any]:
    """OpenViking's add_resource body -> resources.add: `temp_file_id` is an upload, `source_name`
    its name, `to` an exact target (parent + name), `parent` the target directory. Options Skald
    has no use for are left out rather than refused (its clients always send their full set)."""
    known = set(ingest_msgs.AddResourceRequest.__struct_fields__)
    out = {k: v for k, v in data.items() if k in known and v is not None}
    if data.get("temp_file_id"):
        out["upload_id"] = data["temp_file_id"]
        out.pop("path", None)
    if data.get("source_name") and "name" not in out:
        out["name"] = data["source_name"]
    if isinstance(data.get("to"), str) and data["to"].rstrip("/"):
        parent, _, name = data["to"].rstrip("/").rpartition("/")
        out["target_uri"], out["name"] = parent, name
    elif isinstance(data.get("parent"), str):
        out["target_uri"] = data["parent"]
    return out


def ok(result: Any) -> web.Response:
    return web.Response(body=_enc.encode({"status": "ok", "result": result}), content_type="application/json")


async def body_of(request: web.Request) -> dict[str, Any] | web.Response:
    """The JSON object a route was sent, or the error response to send back."""
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError as e:
        return error_response("INVALID_ARGUMENT", f"body is not valid JSON: {e}")
    return body if isinstance(body, dict) else error_response("INVALID_ARGUMENT", "body must be a JSON object")


class Calls:
    """Bus calls for routes that are not one operation each, through the gateway's own forwarding
    (so identity and keys apply as usual). `gw` is the Gateway (its `_key`, `_headers`, `_forward`)."""

    def __init__(self, gw: Any) -> None:
        self.gw = gw

    async def call(self, request: web.Request, op: str, body: dict[str, Any], timeout_s: float = 30.0) -> Any:
        """The operation's result, or the error response to send back as it is."""
        resp = await self.relay(request, op, body, timeout_s)
        env = json.loads(resp.body)  # type: ignore[arg-type]
        return env["result"] if env.get("status") == "ok" else resp

    async def relay(self, request: web.Request, op: str, body: dict[str, Any], timeout_s: float = 30.0) -> web.Response:
        """The operation's reply as the bus gave it (envelope and status), not decoded and re-made."""
        key = self.gw._key(request)
        return await self.gw._forward(op, _enc.encode(body), self.gw._headers(request, key),  # type: ignore[no-any-return]
                                      timeout_s)


def add_compat_routes(app: web.Application, gw: Any) -> None:
    calls = Calls(gw)
    call, relay = calls.call, calls.relay

    async def wait(request: web.Request) -> web.StreamResponse:
        """`wait_processed`: until the work queue is empty and the index replica has caught up."""
        raw = await request.read()
        body = json.loads(raw) if raw.strip() else {}
        limit = min(WAIT_MAX_S, float(body.get("timeout") or WAIT_MAX_S)) if isinstance(body, dict) else WAIT_MAX_S
        t0 = time.monotonic()
        while True:
            stats = await call(request, catalog.SYSTEM_STATS.name, {})
            if isinstance(stats, web.Response):
                return stats
            health = await call(request, catalog.SYSTEM_HEALTH.name, {})
            if isinstance(health, web.Response):
                return health
            pending = int((stats.get("queues", {}).get("work") or {}).get("messages", 0) or 0)
            lag = int((health.get("actors", {}).get("retriever") or {}).get("lag", 0) or 0)
            waited = time.monotonic() - t0
            if (pending == 0 and lag == 0) or waited >= limit:
                return ok({"processed": pending == 0 and lag == 0, "pending_jobs": pending, "index_lag": lag,
                           "waited_s": round(waited, 3)})
            await asyncio.sleep(0.2)

    async def observer(request: web.Request) -> web.StreamResponse:
        """OpenViking's observer pages from `system.health` and `system.stats`."""
        component = request.match_info["component"]
        if component not in OBSERVERS:
            why = unsupported(request.path)
            return error_response("UNIMPLEMENTED" if why else "NOT_FOUND",
                                  f"Skald has no {why}" if why else f"no observer {component!r}", {"known": OBSERVERS})
        if component == "retrieval":
            stats = await call(request, catalog.SYSTEM_STATS.name, {})
            return stats if isinstance(stats, web.Response) else ok(stats.get("retrieval", {}))
        health = await call(request, catalog.SYSTEM_HEALTH.name, {})
        if isinstance(health, web.Response):
            return health
        actors = health.get("actors", {})
        if component == "system":
            return ok({"is_healthy": health.get("status") == "ok", "version": health.get("version"),
                       "components": actors, "journal": health.get("journal", {})})
        if component == "vikingdb":
            retr = actors.get("retriever", {})
            return ok({"index": retr.get("index", {}), "lag": retr.get("lag"), "stream_seq": retr.get("stream_seq")})
        if component == "models":
            ix = actors.get("indexer", {})
            return ok({"embedder": ix.get("embedder"), "summarizer": ix.get("summarizer"),
                       "passages_embedded": ix.get("passages_embedded"), "passages_reused": ix.get("passages_reused")})
        stats = await call(request, catalog.SYSTEM_STATS.name, {})
        return stats if isinstance(stats, web.Response) else ok(stats.get("queues", {}))

    async def batch(request: web.Request) -> web.StreamResponse:
        """`batch_add_messages`: each message in order; stops at the first refusal and says how far
        it got (the ones before it are stored)."""
        sid = request.match_info["session_id"]
        body = await body_of(request)
        if isinstance(body, web.Response):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return error_response("INVALID_ARGUMENT", "`messages` must be a list of message objects")
        ids: list[str] = []
        for i, m in enumerate(messages):
            got = await call(request, catalog.SESSIONS_ADD_MESSAGE.name, message_body(sid, m))
            if isinstance(got, web.Response):
                env = json.loads(got.body)  # type: ignore[arg-type]
                err = env.get("error", {})
                return error_response(err.get("code", "INTERNAL"), f"message {i}: {err.get('message', '')}",
                                      {"added": len(ids), "message_ids": ids})
            ids.append(got["message_id"])
        return ok({"session_id": sid, "added": len(ids), "message_ids": ids})

    async def set_tags(request: web.Request) -> web.StreamResponse:
        """`set_tags` (OpenViking's attrs route) -> content.set_tags, one file at a time."""
        body = await body_of(request)
        if isinstance(body, web.Response):
            return body
        if body.get("recursive"):
            return error_response("INVALID_ARGUMENT", "recursive tagging is not supported: tag each file")
        req = {k: body[k] for k in ("uri", "tags", "mode") if body.get(k) is not None}
        return await relay(request, catalog.CONTENT_SET_TAGS.name, {"tags": [], **req})

    async def archive(request: web.Request) -> web.StreamResponse:
        """`GET /api/v1/sessions/{id}/archives/{archive_id}`: one completed archive's abstract,
        overview and messages (sessions.archives, then the archive directory's own files)."""
        sid, aid = request.match_info["session_id"], request.match_info["archive_id"]
        got = await call(request, catalog.SESSIONS_ARCHIVES.name, {"session_id": sid})
        if isinstance(got, web.Response):
            return got
        found = next((a for a in got["archives"] if a["archive_id"] == aid and a["state"] == "completed"), None)
        if found is None:
            return error_response("NOT_FOUND", f"Archive {aid} not found", {"session_id": sid})
        parts: dict[str, Any] = {"archive_id": aid}
        for field, op, uri in (("abstract", catalog.FS_ABSTRACT.name, found["uri"]),
                               ("overview", catalog.FS_OVERVIEW.name, found["uri"]),
                               ("messages", catalog.FS_READ.name, f"{found['uri']}/messages.jsonl")):
            text = await call(request, op, {"uri": uri})
            if isinstance(text, web.Response):
                return text
            parts[field] = text["content"]
        parts["messages"] = [json.loads(line) for line in parts["messages"].splitlines() if line.strip()]
        return ok(iso_times(parts))

    async def download(request: web.Request) -> web.StreamResponse:
        """`GET /api/v1/content/download`: the file's own bytes (fs.read with `raw`)."""
        uri = request.query.get("uri")
        if not uri:
            return error_response("INVALID_ARGUMENT", "`uri` is required")
        got = await call(request, catalog.FS_READ.name, {"uri": uri, "raw": True})
        if isinstance(got, web.Response):
            return got
        data = base64.b64decode(got["content"]) if got["encoding"] == "base64" else got["content"].encode()
        name = uri.rstrip("/").rsplit("/", 1)[-1]
        return web.Response(body=data, content_type="application/octet-stream",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})

    async def find_skills(request: web.Request) -> web.StreamResponse:
        """`find_skills` -> search.find over skills only."""
        body = await body_of(request)
        if isinstance(body, web.Response):
            return body
        req = {k: body[k] for k in ("query", "limit", "score_threshold", "target_uri") if body.get(k) is not None}
        return await relay(request, catalog.SEARCH_FIND.name, {**req, "context_type": "skill"})

    async def task(request: web.Request) -> web.StreamResponse:
        """`get_task`: an ingest job by the `job_id` resources.add answered with (resources.job), in
        OpenViking's task shape; an id that is no job of the caller's is 404, as OpenViking's is."""
        tid = request.match_info["task_id"]
        if not JOB_ID.fullmatch(tid):
            return error_response("NOT_FOUND", f"no task {tid!r}")
        got = await call(request, catalog.RESOURCES_JOB.name, {"job_id": tid})
        if isinstance(got, web.Response):
            return got
        return ok({"task_id": tid, "task_type": "resource_ingest", "status": TASK_STATUS[got["status"]],
                   "resource_id": got["root_uri"], "error": got.get("error"), "result": got})

    app.router.add_get("/api/v1/tasks/{task_id}", task)
    app.router.add_post("/api/v1/fs/attrs/set_tags", set_tags)
    app.router.add_post("/api/v1/skills/find", find_skills)
    app.router.add_get("/api/v1/content/download", download)
    app.router.add_get("/api/v1/sessions/{session_id}/archives/{archive_id}", archive)
    app.router.add_post("/api/v1/system/wait", wait)
    app.router.add_get("/api/v1/observer/{component}", observer)
    app.router.add_post("/api/v1/sessions/{session_id}/messages/batch", batch)
