"""The session actor: live messages, commit Phase 1, a session's context and archives.

Thin: ownership and forwarding are in `ownership.py`, loading and crash recovery in `recovery.py`,
Phase 1 in `phase1.py`, the context frontier in `frontier.py` (pure), and turns and retention
planning in `turns.py` (pure).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from skald.actors.kit.clock import now as clock_now
from skald.actors.kit.clock import request_id
from skald.actors.kit.decl import handles
from skald.actors.kit.overlap import in_threads
from skald.actors.kit.ports import Calls, Events, LeaseStore, UsageLog, WorkQueue
from skald.actors.kit.request import Ctx
from skald.actors.session import archives, frontier, recovery, state, turns
from skald.actors.session.admission import Admission
from skald.actors.session.batcher import AppendBatcher
from skald.actors.session.ownership import Ownership
from skald.actors.session.phase1 import Phase1, check_request
from skald.actors.session.state import State
from skald.actors.session.tails import Tails
from skald.messages import catalog
from skald.messages import sessions as session_msgs
from skald.messages.catalog import Op
from skald.messages.errors import Conflict, NotFound, Unavailable
from skald.store import archive_state, groupsync
from skald.store import sessions as session_store
from skald.store.session_meta import SessionMeta
from skald.store.sessions import SessionDir, lease_key, session_at, session_dir
from skald.store.treeport import parent
from skald.store.uri import Identity, Namespace, node_of

log = logging.getLogger(__name__)

JOURNAL_FLUSH_S = 5.0  # a commit waits this long for a session's journal to catch up
AUTO_COMMIT_TIMEOUT_S = 120.0
IDLE_SWEEP_S = 1.0
LIST_AT_ONCE = 8  # sessions `sessions.list` counts side by side


class SessionBus(Events, WorkQueue, UsageLog, Calls, LeaseStore, Protocol):
    """The bus ports the session actor uses."""


class Sessions:
    """The session actor: live messages of each session, commit Phase 1, session context, one writer per session."""

    def __init__(self, ns: Namespace, bus: SessionBus, worker_id: str, lease_ttl_s: float = 6.0,
                 clock: Callable[[], float] = clock_now) -> None:
        self.ns = ns
        self.bus = bus
        self.clock = clock
        self._states: dict[str, State] = {}
        self.owners = Ownership(bus, worker_id, lease_ttl_s, on_lost=self._forget)
        self.admission = Admission(self.owners.fence)
        self.phase1 = Phase1(bus, self.owners.fence, clock, self.admission)
        self.appends = AppendBatcher(bus, ns.tree)
        self.added = 0
        self.commits = 0
        self.auto_commits = 0
        self._auto_tasks: set[asyncio.Task[None]] = set()
        self.tails = Tails(on_failure=self._forget)  # a commit's root rewrite and event, after its reply
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.owners.start()
        self._sweeper = asyncio.create_task(self._sweep_idle())

    async def stop(self) -> None:
        for t in [*([self._sweeper] if self._sweeper else []), *self._auto_tasks]:
            t.cancel()
        await asyncio.gather(*self._auto_tasks, *([self._sweeper] if self._sweeper else []), return_exceptions=True)
        await self.tails.drain()  # before the leases go
        await self.owners.stop()

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "owned_sessions": self.owners.owned, "messages_added": self.added,
                "commits": self.commits, "auto_commits": self.auto_commits, "forwarded": self.owners.forwards,
                "journal_backlog": self.appends.backlog(),
                "journal_publish_failures": self.appends.publish_failures,
                "journal_recovered": self.appends.recovered, "append_batches": self.appends.batches,
                "append_flushes": dict(groupsync.COUNTS), "commit_tails_failed": self.tails.failed}

    def _forget(self, key: str) -> None:
        self._states.pop(key, None)

    # ----- auto-commit -------------------------------------------------------------------

    def _maybe_auto_commit(self, st: State, ident: Identity) -> None:
        """Start the session's own commit when its policy says so: one at a time per session,
        through the bus like any caller's (ownership, journal and Phase 2 as usual)."""
        if st.auto_running:
            return
        why = state.auto_commit_due(st.auto_commit, st.root, time.monotonic() - st.last_add)
        if why is None:
            return
        st.auto_running = True
        task = asyncio.create_task(self._auto_commit(st, ident, why))
        self._auto_tasks.add(task)
        task.add_done_callback(self._auto_tasks.discard)

    async def _auto_commit(self, st: State, ident: Identity, why: str) -> None:
        try:
            res = await self.bus.call(catalog.SESSIONS_COMMIT, session_msgs.CommitRequest(
                session_id=st.sdir.session_id), ident, AUTO_COMMIT_TIMEOUT_S)
            self.auto_commits += 1
            log.info("auto-commit of %s (%s): %s", st.sdir.session_id, why, getattr(res, "status", res))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the policy tries again on the next message or sweep
            log.warning("auto-commit of %s (%s) failed: %s", st.sdir.session_id, why, e)
        finally:
            st.auto_running = False

    async def _sweep_idle(self) -> None:
        """Sessions this worker holds whose policy has an idle limit are checked every second."""
        while True:
            await asyncio.sleep(IDLE_SWEEP_S)
            for st in list(self._states.values()):
                if st.auto_commit is not None and st.auto_commit.idle_s is not None and st.root and st.ident:
                    self._maybe_auto_commit(st, st.ident)

    def _where(self, ident: Identity, session_id: str) -> tuple[str, SessionDir]:
        return lease_key(ident.account, ident.user, session_id), session_dir(self.ns, ident, session_id)

    async def _on_session(self, op: Op, req: msgspec.Struct, ctx: Ctx, session_id: str, create: bool,
                          body: Callable[[str, State], Awaitable[Any]]) -> Any:
        """Run `body` on the session's state at its owner (loading and recovering it first)."""
        key = lease_key(ctx.identity.account, ctx.identity.user, session_id)
        # A loaded session was resolved (tenancy, name, symlinks) then; a new one is, before its lease.
        sdir = None if key in self._states else session_dir(self.ns, ctx.identity, session_id)

        async def here() -> Any:
            await self.tails.settle(key)
            st = self._states.get(key) or await self._state(key, sdir or session_dir(
                self.ns, ctx.identity, session_id), create, lazy=op is catalog.SESSIONS_ADD_MESSAGE)
            await recovery.requeue_pending(self.bus, st, ctx.identity)
            if st.journal_unchecked:  # first use after a load: finish what a crash left unpublished
                await self.appends.recover(key, st.sdir.session_id, st.root, ctx.identity)
                st.journal_unchecked = False
            return await body(key, st)

        return await self.owners.run(op, req, ctx, key, here)

    async def _state(self, key: str, sdir: SessionDir, create: bool, lazy: bool = False) -> State:
        """Loaded (and recovered) on first use. `lazy`: its first message's group commit follows, so
        `.meta.json` goes without fsync (a lost one is rebuilt: `recovery.load`; fsyncs capped ~900/s)."""
        st = self._states.get(key)
        if st is not None:
            return st
        if not await asyncio.to_thread(sdir.exists):
            if not create:
                raise NotFound("no such session", {"session_id": sdir.session_id})
            self.owners.fence(key)
            meta = SessionMeta(session_id=sdir.session_id, created_at=self.clock())
            await asyncio.to_thread(session_store.save_session_meta, sdir, meta, not lazy)
        await self.appends.quiet(key)  # a line still being written must be on disk before it is read
        st = await asyncio.to_thread(recovery.load, sdir, lambda: self.owners.fence(key))
        self._states[key] = st
        return st

    def _info(self, st: State) -> session_msgs.SessionInfo:
        """A loaded session's counters, from its state: archives are numbered from 1 with no gap
        (each commit's is the next), so the newest one's number is their count, with no listing of
        the history (a round trip on the JetStream tree, on every context request with a session)."""
        return session_msgs.SessionInfo(session_id=st.sdir.session_id, uri=st.sdir.uri, created_at=st.created_at,
                                        message_count=len(st.root), total_message_count=st.total,
                                        commit_count=st.commit_count, archives=st.max_index,
                                        auto_commit=st.auto_commit)

    # ----- requests --------------------------------------------------------------------

    @handles(catalog.SESSIONS_CREATE, journal=True)
    async def create(self, req: session_msgs.CreateRequest, ctx: Ctx) -> Any:
        """`sessions.create`: Create a session."""
        sid = req.session_id or request_id("session")

        async def run(key: str, st: State) -> session_msgs.SessionInfo:
            if req.auto_commit is not None and req.auto_commit != st.auto_commit:
                st.auto_commit = req.auto_commit
                self.owners.fence(key)
                await asyncio.to_thread(session_store.save_session_meta, st.sdir, state.meta_of(st))
            return await asyncio.to_thread(self._info, st)

        return await self._on_session(catalog.SESSIONS_CREATE, session_msgs.CreateRequest(
            session_id=sid, auto_commit=req.auto_commit), ctx, sid, True, run)

    @handles(catalog.SESSIONS_GET)
    async def get(self, req: session_msgs.SessionRef, ctx: Ctx) -> Any:
        """`sessions.get`: A session's counters."""
        async def run(key: str, st: State) -> session_msgs.SessionInfo:
            return await asyncio.to_thread(self._info, st)  # it lists the archives: off the event loop

        return await self._on_session(catalog.SESSIONS_GET, req, ctx, req.session_id, False, run)

    @handles(catalog.SESSIONS_LIST)
    async def list(self, req: session_msgs.ListRequest, ctx: Ctx) -> session_msgs.SessionList:
        """`sessions.list`: List sessions."""
        base = session_store.sessions_root(self.ns, ctx.identity)

        def names() -> list[str]:
            try:
                return [e.name for e in self.ns.tree.list(base.key, details=False) if not e.name.startswith(".")]
            except (FileNotFoundError, NotADirectoryError):
                return []

        def info(n: str) -> session_msgs.SessionInfo:
            sdir = session_at(self.ns, self.ns.child(base, n))
            st = self._states.get(lease_key(ctx.identity.account, ctx.identity.user, n))
            if st is not None:  # loaded here: its live counters
                return session_msgs.SessionInfo(
                    session_id=n, uri=sdir.uri, created_at=st.created_at, message_count=len(st.root),
                    total_message_count=st.total, commit_count=st.commit_count, archives=st.max_index)
            # Elsewhere or not loaded: counted from what is stored (a corrupt meta is repaired by
            # its owner; neither a message nor a commit rewrites it).
            meta, live, total, archives = recovery.counted(sdir)
            return session_msgs.SessionInfo(
                session_id=n, uri=sdir.uri, created_at=meta.created_at, message_count=live,
                total_message_count=total, commit_count=max(meta.commit_count, archives), archives=archives)

        # Each session's few reads wait on the store (round trips, on the JetStream tree): several
        # sessions are counted at once, in order.
        found = await asyncio.to_thread(names)
        return session_msgs.SessionList(sessions=await in_threads(info, found[: req.limit], LIST_AT_ONCE))

    @handles(catalog.SESSIONS_DELETE, journal=True)
    async def delete(self, req: session_msgs.SessionRef, ctx: Ctx) -> Any:
        """`sessions.delete`: Delete a session."""
        key, sdir = self._where(ctx.identity, req.session_id)

        async def here() -> session_msgs.DeleteResult:
            await self.tails.settle(key)
            if not await asyncio.to_thread(sdir.alive):
                raise NotFound("no such session", {"session_id": req.session_id})
            self.owners.fence(key)
            # Out of sight at once (a rename), then removed: a crash in between leaves only a temp name.
            trash = f"{parent(sdir.key)}/.tmp-del-{uuid.uuid4().hex}"
            await asyncio.to_thread(sdir.tree.move, sdir.key, trash)
            await asyncio.to_thread(lambda: sdir.tree.remove(trash, recursive=True))
            self._states.pop(key, None)
            return session_msgs.DeleteResult(session_id=req.session_id, deleted=True)

        return await self.owners.run(catalog.SESSIONS_DELETE, req, ctx, key, here)

    @handles(catalog.SESSIONS_ADD_MESSAGE)  # journaled by the batch's messages_added event
    async def add_message(self, req: session_msgs.AddMessageRequest, ctx: Ctx) -> Any:
        """`sessions.add_message`: Append a message to a session."""
        async def run(key: str, st: State) -> session_msgs.AddMessageResult:
            known = st.requests.get(req.request_id) if req.request_id and not req.id else None
            mid = req.id or known or f"msg_{st.total + 1:08d}"
            if mid in st.ids:
                return session_msgs.AddMessageResult(session_id=req.session_id, message_id=mid,
                                                     message_count=len(st.root), total_message_count=st.total,
                                                     duplicate=True)
            msg = session_msgs.Message(id=mid, role=req.role, parts=list(req.parts), created_at=self.clock(),
                                       turn_id=req.turn_id, message_kind=req.message_kind,
                                       source_message_ids=req.source_message_ids, request_id=req.request_id)
            msg = await self.admission.admit(key, st, msg)  # oversized tool outputs to files first
            self.owners.fence(key)
            await self.appends.append(key, req.session_id, st.sdir.fkey(session_store.MESSAGES), msg, ctx.identity,
                                      lambda: self.owners.fence(key))
            st.root.append(msg)
            st.ids.add(mid)
            if req.request_id:
                st.requests[req.request_id] = mid
            st.total += 1
            self.added += 1
            st.last_add, st.ident = time.monotonic(), ctx.identity
            self._maybe_auto_commit(st, ctx.identity)
            return session_msgs.AddMessageResult(session_id=req.session_id, message_id=mid,
                                                 message_count=len(st.root), total_message_count=st.total)

        return await self._on_session(catalog.SESSIONS_ADD_MESSAGE, req, ctx, req.session_id, True, run)

    @handles(catalog.SESSIONS_COMMIT, timeout_s=300.0, journal=True)
    async def commit(self, req: session_msgs.CommitRequest, ctx: Ctx) -> Any:
        """`sessions.commit`: Commit a session (archive, summarise)."""
        check_request(req)

        async def run(key: str, st: State) -> session_msgs.CommitResult:
            # The journal must hold every live message before any is archived (see batcher.recover).
            if not await self.appends.flush(key, JOURNAL_FLUSH_S):
                raise Unavailable("the session's journal is behind (JetStream not storing events); retry",
                                  {"backlog": self.appends.backlog(key), "retry_after_ms": 1000})
            try:
                result, tail = await self.phase1.commit(key, st, req, ctx)
            except BaseException:
                # Whatever failed, the disk is the truth: the next request reloads the session and
                # load() finishes an interrupted Phase 1 (archived ids dropped from root, the
                # archive's Phase 2 queued), so a retried commit never archives a message twice.
                self._forget(key)
                raise
            if result.status == "accepted":
                self.commits += 1
            if tail is not None:
                self.tails.after(key, tail)
            return result

        return await self._on_session(catalog.SESSIONS_COMMIT, req, ctx, req.session_id, False, run)

    @handles(catalog.SESSIONS_CONTEXT)
    async def context(self, req: session_msgs.ContextRequest, ctx: Ctx) -> Any:
        """`sessions.context`: A session's context: overview + live messages."""
        async def run(key: str, st: State) -> session_msgs.ContextResult:
            states = await asyncio.to_thread(archives.tail_states, st)
            uris = {s.listing.archive_id: st.sdir.archive_uri(s.listing.archive_id) for s in states}
            overview, msgs, cps = archive_state.assemble(states, st.root, uris)
            trimmed = 0
            if req.max_tokens is not None:
                msgs, trimmed = turns.fit_to_budget(msgs, max(0, req.max_tokens - turns.estimate(overview)))
            tail = [s for s in states if s.listing.archive_id != frontier.FRONTIER_ID]
            unc = archive_state.uncovered(tail)
            stats = session_msgs.ContextStats(
                archives=st.max_index, completed=st.frontier.index + sum(s.state == "completed" for s in tail),
                pending=sum(s.state == "pending" for s in tail), failed=sum(s.state == "failed" for s in tail),
                invalid=sum(s.state == "invalid" for s in tail),
                uncovered_messages=sum(len(s.listing.messages) for s in unc), root_messages=len(st.root),
                checkpoints=cps, trimmed_messages=trimmed,
                estimated_tokens=sum(turns.message_tokens(m) for m in msgs) + turns.estimate(overview))
            return session_msgs.ContextResult(session_id=req.session_id, latest_archive_overview=overview,
                                              messages=msgs, stats=stats)

        return await self._on_session(catalog.SESSIONS_CONTEXT, req, ctx, req.session_id, False, run)

    @handles(catalog.SESSIONS_RETRY_ARCHIVE, journal=True)
    async def retry_archive(self, req: session_msgs.RetryArchiveRequest, ctx: Ctx) -> Any:
        """A failed or quarantined archive's Phase 2 again (after the model recovered): its markers
        go, it is pending (its raw back in the live context) and its job is queued."""

        async def run(key: str, st: State) -> session_msgs.ArchiveInfo:
            index = int(req.archive_id.rsplit("_", 1)[1])
            state = await asyncio.to_thread(session_store.marker_state, st.sdir, index)
            if state == "missing":
                raise NotFound(f"session {req.session_id!r} has no archive {req.archive_id!r}",
                               {"archive_id": req.archive_id})
            if state not in ("failed", "quarantined"):
                raise Conflict(f"the archive is {state}; only a failed or quarantined one is retried",
                               {"archive_id": req.archive_id, "state": state})
            self.owners.fence(key)
            await asyncio.to_thread(session_store.clear_failure, st.sdir, req.archive_id)
            st.frontier = frontier.Frontier()  # it may have folded over this archive: look again
            st.archives.pop(index, None)
            await self.bus.enqueue(catalog.ARCHIVE, session_msgs.Phase2Job(
                account=ctx.identity.account, user=ctx.identity.user, session_id=st.sdir.session_id,
                archive_id=req.archive_id), f"{st.sdir.archive_uri(req.archive_id)}#retry-{clock_now()}")
            listing = await asyncio.to_thread(session_store.read_archive, st.sdir, index)
            return archives.archive_info(st.sdir, archive_state.scan([listing])[0])

        return await self._on_session(catalog.SESSIONS_RETRY_ARCHIVE, req, ctx, req.session_id, False, run)

    @handles(catalog.SESSIONS_USED, journal=True)
    async def used(self, req: session_msgs.UsedRequest, ctx: Ctx) -> session_msgs.UsedResult:
        """Counted at once on the bus (a counter per node), so hotness sees it before any commit."""
        _, sdir = self._where(ctx.identity, req.session_id)
        nodes = list(dict.fromkeys(node_of(u, ctx.identity) for u in req.uris))
        if not await asyncio.to_thread(sdir.alive):
            raise NotFound("no such session", {"session_id": req.session_id})
        await self.bus.count_usage(ctx.identity.account, nodes, req.request_id or request_id("used"))
        return session_msgs.UsedResult(session_id=req.session_id, counted=nodes)

    @handles(catalog.SESSIONS_ARCHIVES)
    async def archives(self, req: session_msgs.SessionRef, ctx: Ctx) -> Any:
        """`sessions.archives`: A session's archives and their state."""
        async def run(key: str, st: State) -> session_msgs.ArchivesResult:
            states = archive_state.scan(await asyncio.to_thread(archives.listings, st))
            return session_msgs.ArchivesResult(session_id=req.session_id,
                                               archives=[archives.archive_info(st.sdir, s) for s in states])

        return await self._on_session(catalog.SESSIONS_ARCHIVES, req, ctx, req.session_id, False, run)
