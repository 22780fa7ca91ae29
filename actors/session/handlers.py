"""The session actor: one owner per session (lease), live messages, commit Phase 1, context.

Phase 1 order (each step durable before the next): tool outputs to `tool-results/` -> archive
directory (raw messages + retention plan, built aside and renamed in) -> Phase 2 job on the work
queue (`Nats-Msg-Id` = archive URI) -> root rewritten without the archived messages -> reply.
A crash between any two steps leaves every message in at least one place; the next owner to
load the session finishes the step (drops archived ids from root, re-enqueues pending Phase 2).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from skald.actors.kit.clock import now as clock_now
from skald.actors.kit.clock import request_id
from skald.actors.kit.decl import handles
from skald.actors.kit.lease import Leases
from skald.actors.kit.request import Ctx
from skald.actors.session import externalize as X
from skald.actors.session import turns as T
from skald.actors.session.batcher import AppendBatcher
from skald.messages import sessions as M
from skald.messages.errors import InvalidArgument, NotFound, Unavailable
from skald.store import archive_state as A
from skald.store import faults
from skald.store import sessions as Fs
from skald.store.sessions import lease_key
from skald.store.uri import Identity, Namespace, VikingPath

log = logging.getLogger("skald.session")
ARCHIVE_QUEUE = "archive"
TURN_DEFAULTS = {"keep_recent_turn_count": 3, "retained_message_token_budget": 12_000, "min_raw_tail_steps": 1}


@dataclass(slots=True)
class State:
    """The owner's view of one session (dropped when ownership is lost)."""

    vp: VikingPath
    root: list[M.Message]
    ids: set[str]
    total: int
    commit_count: int
    created_at: float
    archives: dict[int, A.ArchiveListing] = field(default_factory=dict)  # only immutable (completed) ones
    pending_recovery: list[int] = field(default_factory=list)  # pending archives found on load
    # Context frontier: every archive up to `frontier` is completed (or a covered failure), so
    # a context read only looks past it, whatever the number of completed archives.
    max_index: int = 0
    frontier: int = 0
    frontier_overview: str = ""
    frontier_checkpoints: list[dict[str, Any]] = field(default_factory=list)


class Sessions:
    def __init__(self, ns: Namespace, bus: Any, worker_id: str, lease_ttl_s: float = 6.0,
                 clock: Callable[[], float] = clock_now) -> None:
        self.ns = ns
        self.bus = bus
        self.clock = clock
        self.leases = Leases(bus, worker_id, lease_ttl_s, on_lost=self._forget)
        self._states: dict[str, State] = {}
        self.appends = AppendBatcher(bus)
        self._locks: dict[str, asyncio.Lock] = {}
        self.added = 0
        self.commits = 0
        self.forwards = 0

    async def start(self) -> None:
        self.leases.start()

    async def stop(self) -> None:
        await self.leases.stop()

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "owned_sessions": len(self.leases.held), "messages_added": self.added,
                "commits": self.commits, "forwarded": self.forwards}

    def _forget(self, key: str) -> None:
        self._states.pop(key, None)

    # ----- routing to the owner --------------------------------------------------------

    def _where(self, ident: Identity, session_id: str) -> tuple[str, VikingPath]:
        vp = self.ns.resolve(f"viking://~/sessions/{session_id}", ident)
        return lease_key(ident.account, ident.user, session_id), vp

    async def _owned(self, op: str, req: msgspec.Struct, ctx: Ctx, key: str,
                     run: Callable[[], Any]) -> Any:
        """Run `run` here if this worker owns the session, else forward to the owner."""
        while True:
            owner = await self.leases.owner(key)
            if owner is None:
                lock = self._locks.setdefault(key, asyncio.Lock())
                async with lock:
                    return await run()
            if ctx.forwarded:
                raise Unavailable("session owned by another worker; retry", {"owner": owner})
            try:
                self.forwards += 1
                ctx.relayed = True
                return await self.bus.forward(owner, op, req, ctx.identity, max(0.05, ctx.remaining() - 0.1))
            except Unavailable:
                # The owner is gone; its lease expires within the TTL and then this worker takes it.
                if ctx.remaining() < 0.5:
                    raise
                await asyncio.sleep(0.2)

    async def _on_session(self, op: str, req: msgspec.Struct, ctx: Ctx, session_id: str, create: bool,
                          body: Callable[[str, State], Any]) -> Any:
        """Run `body` on the session's state at its owner (loading and recovering it first)."""
        key, vp = self._where(ctx.identity, session_id)

        async def run() -> Any:
            st = await self._state(key, vp, create=create)
            await self._recover(st, ctx.identity)
            return await body(key, st)

        return await self._owned(op, req, ctx, key, run)

    async def _state(self, key: str, vp: VikingPath, create: bool) -> State:
        st = self._states.get(key)
        if st is not None:
            return st
        if not (vp.path / ".meta.json").exists() and not (vp.path / "messages.jsonl").exists():
            if not create:
                raise NotFound("no such session", {"session_id": vp.name})
            self.leases.check(key)
            await asyncio.to_thread(Fs.write_json, vp.path / ".meta.json",
                                    {"session_id": vp.name, "created_at": self.clock(), "total_message_count": 0,
                                     "commit_count": 0})
        st = await asyncio.to_thread(self._load, key, vp)
        self._states[key] = st
        return st

    def _load(self, key: str, vp: VikingPath) -> State:
        meta = Fs.read_json(vp.path / ".meta.json") or {}
        root = Fs.read_messages(vp.path / "messages.jsonl")
        archived: set[str] = set()
        pending: list[int] = []
        for i in Fs.archive_indexes(vp.path):
            listing = Fs.read_archive(vp.path, i)
            archived.update(m.id for m in listing.messages)
            if listing.done is None and listing.failed is None:
                pending.append(i)
        if any(m.id in archived for m in root):
            # Phase 1 died after the archive was durable but before root was rewritten: finish it.
            self.leases.check(key)
            root = [m for m in root if m.id not in archived]
            Fs.write_atomic_lines(vp.path / "messages.jsonl", root)
        ids = archived | {m.id for m in root}
        st = State(vp=vp, root=root, ids=ids, total=max(int(meta.get("total_message_count", 0)), len(ids)),
                   commit_count=int(meta.get("commit_count", 0)), created_at=float(meta.get("created_at", 0.0)),
                   max_index=max(Fs.archive_indexes(vp.path), default=0))
        st.pending_recovery = pending
        return st

    async def _recover(self, st: State, ident: Identity) -> None:
        """Pending archives found on load get their Phase 2 job again (deduplicated, idempotent)."""
        for i in st.pending_recovery:
            uri = f"{st.vp.uri}/history/{Fs.archive_name(i)}"
            await self.bus.enqueue(ARCHIVE_QUEUE, M.Phase2Job(account=ident.account, user=ident.user,
                                                              session_id=st.vp.name, archive_id=Fs.archive_name(i)),
                                   uri)
        st.pending_recovery = []

    # ----- requests --------------------------------------------------------------------

    @handles("sessions.create", M.CreateRequest, journal=True)
    async def create(self, req: M.CreateRequest, ctx: Ctx) -> Any:
        sid = req.session_id or request_id("session")

        async def run(key: str, st: State) -> M.SessionInfo:
            return self._info(st)

        return await self._on_session("sessions.create", M.CreateRequest(session_id=sid), ctx, sid, True, run)

    def _info(self, st: State) -> M.SessionInfo:
        return M.SessionInfo(session_id=st.vp.name, uri=st.vp.uri, created_at=st.created_at,
                             message_count=len(st.root), total_message_count=st.total, commit_count=st.commit_count,
                             archives=len(Fs.archive_indexes(st.vp.path)))

    @handles("sessions.get", M.SessionRef)
    async def get(self, req: M.SessionRef, ctx: Ctx) -> Any:
        async def run(key: str, st: State) -> M.SessionInfo:
            return self._info(st)

        return await self._on_session("sessions.get", req, ctx, req.session_id, False, run)

    @handles("sessions.list", M.ListRequest)
    async def list(self, req: M.ListRequest, ctx: Ctx) -> M.SessionList:
        base = self.ns.resolve("viking://~/sessions", ctx.identity)

        def scan() -> list[M.SessionInfo]:
            out = []
            try:
                names = sorted(n for n in os.listdir(base.path) if not n.startswith("."))
            except FileNotFoundError:
                return []
            for n in names[: req.limit]:
                meta = Fs.read_json(base.path / n / ".meta.json") or {}
                out.append(M.SessionInfo(session_id=n, uri=f"{base.uri}/{n}",
                                         created_at=float(meta.get("created_at", 0)),
                                         total_message_count=int(meta.get("total_message_count", 0)),
                                         commit_count=int(meta.get("commit_count", 0))))
            return out

        return M.SessionList(sessions=await asyncio.to_thread(scan))

    @handles("sessions.delete", M.SessionRef, journal=True)
    async def delete(self, req: M.SessionRef, ctx: Ctx) -> Any:
        key, vp = self._where(ctx.identity, req.session_id)

        async def run() -> M.DeleteResult:
            if not vp.path.exists():
                raise NotFound("no such session", {"session_id": req.session_id})
            self.leases.check(key)
            trash = vp.path.parent / f".tmp-del-{uuid.uuid4().hex}"
            await asyncio.to_thread(os.rename, vp.path, trash)
            await asyncio.to_thread(shutil.rmtree, trash, True)
            self._states.pop(key, None)
            return M.DeleteResult(session_id=req.session_id, deleted=True)

        return await self._owned("sessions.delete", req, ctx, key, run)

    @handles("sessions.add_message", M.AddMessageRequest)  # journaled by the batch's messages_added event
    async def add_message(self, req: M.AddMessageRequest, ctx: Ctx) -> Any:
        async def run(key: str, st: State) -> M.AddMessageResult:
            vp = st.vp
            mid = req.id or f"msg_{st.total + 1:08d}"
            if mid in st.ids:
                return M.AddMessageResult(session_id=req.session_id, message_id=mid, message_count=len(st.root),
                                          total_message_count=st.total, duplicate=True)
            msg = M.Message(id=mid, role=req.role, parts=list(req.parts), created_at=self.clock(),
                            turn_id=req.turn_id, message_kind=req.message_kind,
                            source_message_ids=req.source_message_ids)
            self.leases.check(key)
            await self.appends.append(key, req.session_id, vp.path / "messages.jsonl", msg, ctx.identity)
            st.root.append(msg)
            st.ids.add(mid)
            st.total += 1
            self.added += 1
            return M.AddMessageResult(session_id=req.session_id, message_id=mid, message_count=len(st.root),
                                      total_message_count=st.total)

        return await self._on_session("sessions.add_message", req, ctx, req.session_id, True, run)

    @handles("sessions.commit", M.CommitRequest, timeout_s=300.0, journal=True)
    async def commit(self, req: M.CommitRequest, ctx: Ctx) -> Any:
        turn_fields = {k: getattr(req, k) for k in TURN_DEFAULTS if getattr(req, k) is not None}
        if req.retention_mode is None and turn_fields:
            raise InvalidArgument("Turn fields need retention_mode=\"turn_budget\"", {"fields": sorted(turn_fields)})
        if req.retention_mode is not None and req.keep_recent_count is not None:
            raise InvalidArgument("keep_recent_count is the legacy mode; do not combine it with turn_budget")

        async def run(key: str, st: State) -> M.CommitResult:
            return await self._phase1(key, st, req, ctx)

        return await self._on_session("sessions.commit", req, ctx, req.session_id, False, run)

    async def _phase1(self, key: str, st: State, req: M.CommitRequest, ctx: Ctx) -> M.CommitResult:
        if not st.root:
            return M.CommitResult(session_id=st.vp.name, status="skipped", reason="no live messages")
        root = await self._externalize(key, st)
        if req.retention_mode == "turn_budget":
            opts = {k: getattr(req, k) if getattr(req, k) is not None else v for k, v in TURN_DEFAULTS.items()}
            plan = T.plan_retention(root, opts["keep_recent_turn_count"], opts["retained_message_token_budget"],
                                    opts["min_raw_tail_steps"])
        else:
            plan = T.plan_keep_recent(root, req.keep_recent_count or 0)
        if not plan.archive_messages:
            return M.CommitResult(session_id=st.vp.name, status="skipped", plan=msgspec.to_builtins(plan),
                                  reason="the retention policy keeps every live message")
        archive_ids = set(plan.archive_messages)
        archived = [m for m in root if m.id in archive_ids]
        retained = [m for m in root if m.id not in archive_ids]
        index = st.max_index + 1
        name = Fs.archive_name(index)
        uri = f"{st.vp.uri}/history/{name}"
        requests = []
        if plan.checkpoint_source_message_ids:
            requests.append({"index": 0, "turn_anchor_message_id": plan.turn_anchor,
                             "source_message_ids": plan.checkpoint_source_message_ids,
                             "budget_tokens": CHECKPOINT_BUDGET_TOKENS})
        meta = {"archive_id": name, "session_id": st.vp.name, "created_at": self.clock(),
                "retention_plan": msgspec.to_builtins(plan), "checkpoint_requests": requests}
        self.leases.check(key)
        await asyncio.to_thread(Fs.create_archive, st.vp.path, index, archived, meta)
        st.max_index = index
        faults.point("commit.after_archive")
        job = M.Phase2Job(account=ctx.identity.account, user=ctx.identity.user, session_id=st.vp.name,
                          archive_id=name)
        waiter = self.bus.waiter(f"archive.finished.{key}.{name}") if req.wait else None
        w = await waiter.__aenter__() if waiter else None
        try:
            await self.bus.enqueue(ARCHIVE_QUEUE, job, uri)
            faults.point("commit.after_enqueue")
            self.leases.check(key)
            await asyncio.to_thread(Fs.write_atomic_lines, st.vp.path / "messages.jsonl", retained)
            faults.point("commit.after_root")
            st.root = retained
            st.commit_count += 1
            await asyncio.to_thread(Fs.merge_meta, st.vp.path / ".meta.json",
                                    {"total_message_count": st.total, "commit_count": st.commit_count})
            self.commits += 1
            await self.bus.publish_event(f"session.committed.{key}", M.CommitResult(
                session_id=st.vp.name, status="accepted", archive_uri=uri, archive_id=name,
                archived_messages=len(archived), retained_messages=len(retained)), uri)
            phase2 = None
            if w is not None:
                raw = await w.wait(max(0.0, ctx.remaining() - 0.2))
                phase2 = msgspec.json.decode(raw).get("state", "pending") if raw else "pending"
        finally:
            if waiter:
                await waiter.__aexit__(None, None, None)
        return M.CommitResult(session_id=st.vp.name, status="accepted", archive_uri=uri, archive_id=name,
                              archived_messages=len(archived), retained_messages=len(retained),
                              plan=msgspec.to_builtins(plan), phase2=phase2)

    async def _externalize(self, key: str, st: State) -> list[M.Message]:
        """Move oversized tool outputs of each Turn to `tool-results/` (durably) before planning."""
        chosen = X.plan_externalization(st.root)
        if not chosen:
            return st.root
        by_msg: dict[str, dict[int, X.Externalize]] = {}
        for e in chosen:
            by_msg.setdefault(e.message_id, {})[e.part_index] = e
        out = []
        for m in st.root:
            todo = by_msg.get(m.id)
            if not todo:
                out.append(m)
                continue
            parts = list(m.parts)
            for i, e in todo.items():
                p = parts[i]
                assert isinstance(p, M.ToolPart)
                self.leases.check(key)
                await asyncio.to_thread(Fs.write_bytes, st.vp.path / "tool-results" / e.filename,
                                        p.tool_output.encode())
                parts[i] = msgspec.structs.replace(p, tool_output=X.preview(p.tool_output),
                                                   tool_output_uri=f"{st.vp.uri}/tool-results/{e.filename}",
                                                   tool_output_chars=len(p.tool_output), tool_output_truncated=True)
            out.append(msgspec.structs.replace(m, parts=parts))
        return out

    def _tail_states(self, st: State) -> list[A.ArchiveState]:
        """Archive states past the frontier, plus one synthetic completed state standing for
        everything before it; the frontier advances over archives that became final."""
        tail = [Fs.read_archive(st.vp.path, i) for i in range(st.frontier + 1, st.max_index + 1)]
        tail = [a for a in tail if a.messages or a.done is not None or a.failed is not None
                or (st.vp.path / "history" / a.archive_id).exists()]
        states = A.scan(tail)
        live = {m.id for m in st.root} | {m.id for s in states if not s.covered for m in s.listing.messages}
        for s in states:
            if not (s.state == "completed" or s.covered):
                break
            st.frontier = s.listing.index
            if s.state == "completed":
                st.frontier_overview = s.listing.overview or ""
                uri = f"{st.vp.uri}/history/{s.listing.archive_id}"
                st.frontier_checkpoints += [{**cp, "archive_uri": uri} for cp in s.listing.checkpoints]
        # A checkpoint matters only while its anchor is live, and an anchor never comes back.
        st.frontier_checkpoints = [cp for cp in st.frontier_checkpoints if cp.get("turn_anchor_message_id") in live]
        rest = [s for s in states if s.listing.index > st.frontier]
        if st.frontier == 0:
            return rest
        head = A.ArchiveState(A.ArchiveListing(archive_id="frontier", index=st.frontier, done={},
                                               overview=st.frontier_overview,
                                               checkpoints=st.frontier_checkpoints), "completed", covered=True)
        return [head, *rest]

    def _listings(self, st: State) -> list[A.ArchiveListing]:
        out = []
        for i in Fs.archive_indexes(st.vp.path):
            cached = st.archives.get(i)
            if cached is not None:
                out.append(cached)
                continue
            listing = Fs.read_archive(st.vp.path, i)
            if listing.done is not None and listing.overview is not None:
                st.archives[i] = listing  # completed is terminal: never read again
            out.append(listing)
        return out

    @handles("sessions.context", M.ContextRequest)
    async def context(self, req: M.ContextRequest, ctx: Ctx) -> Any:
        async def run(key: str, st: State) -> M.ContextResult:
            vp = st.vp
            states = await asyncio.to_thread(self._tail_states, st)
            uris = {s.listing.archive_id: f"{vp.uri}/history/{s.listing.archive_id}" for s in states}
            overview, msgs, cps = A.assemble(states, st.root, uris)
            tail = [s for s in states if s.listing.archive_id != "frontier"]
            unc = A.uncovered(tail)
            stats = M.ContextStats(
                archives=st.max_index, completed=st.frontier + sum(s.state == "completed" for s in tail),
                pending=sum(s.state == "pending" for s in tail), failed=sum(s.state == "failed" for s in tail),
                invalid=sum(s.state == "invalid" for s in tail),
                uncovered_messages=sum(len(s.listing.messages) for s in unc), root_messages=len(st.root),
                checkpoints=cps, estimated_tokens=sum(T.message_tokens(m) for m in msgs) + T.estimate(overview))
            return M.ContextResult(session_id=req.session_id, latest_archive_overview=overview, messages=msgs,
                                   stats=stats)

        return await self._on_session("sessions.context", req, ctx, req.session_id, False, run)

    @handles("sessions.archives", M.SessionRef)
    async def archives(self, req: M.SessionRef, ctx: Ctx) -> Any:
        async def run(key: str, st: State) -> M.ArchivesResult:
            vp = st.vp
            states = A.scan(await asyncio.to_thread(self._listings, st))
            out = []
            for s in states:
                a = s.listing
                cov = a.done if a.done is not None else None
                out.append(M.ArchiveInfo(archive_id=a.archive_id, uri=f"{vp.uri}/history/{a.archive_id}",
                                         state=s.state, coverage=cov, failure=a.failed,
                                         message_count=len(a.messages)))
            return M.ArchivesResult(session_id=req.session_id, archives=out)

        return await self._on_session("sessions.archives", req, ctx, req.session_id, False, run)


CHECKPOINT_BUDGET_TOKENS = 400  # a checkpoint summary is cut to this many tokens
