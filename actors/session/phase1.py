"""Commit Phase 1 (docs/design/sessions.md): durable and fast; Phase 2 runs later on the archive work queue.

Order (each step durable before the next): tool outputs to `tool-results/` -> archive directory
(raw messages + retention plan, built aside and renamed in) -> Phase 2 job on the work queue
(`Nats-Msg-Id` = archive URI) -> reply -> root rewritten without the archived messages ->
`session.committed` event. A crash between any two steps leaves every message in at least one
place; the next owner to load the session finishes the step (`recovery.load`).

Once the archive is durable the commit is decided: root's rewrite only tidies the disk (a root
still holding archived ids is cut back on load), so it runs after the reply (`tails.Tails`),
and the session's next request waits for it (`Tails.settle`). That keeps two of
Phase 1's six fsyncs and an event's round trip off the caller's latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from skald.actors.kit.ports import Events, Waiter, WorkQueue
from skald.actors.kit.request import Ctx
from skald.actors.session import turns
from skald.actors.session.admission import Admission
from skald.actors.session.state import State
from skald.actors.session.tails import Work
from skald.messages import catalog, subjects
from skald.messages import sessions as session_msgs
from skald.messages.errors import InvalidArgument, Unavailable
from skald.messages.ingest import memories_job_id
from skald.store import faults
from skald.store import sessions as session_store
from skald.store.session_meta import ArchiveMeta, CheckpointRequest

log = logging.getLogger("skald.session")

TURN_DEFAULTS = {"keep_recent_turn_count": 3, "retained_message_token_budget": 12_000, "min_raw_tail_steps": 1}
CHECKPOINT_BUDGET_TOKENS = 400  # a checkpoint summary is cut to this many tokens


def check_request(req: session_msgs.CommitRequest) -> None:
    """Turn fields belong to turn_budget retention; keep_recent_count is the legacy mode alone."""
    turn_fields = {k: getattr(req, k) for k in TURN_DEFAULTS if getattr(req, k) is not None}
    if req.retention_mode is None and turn_fields:
        raise InvalidArgument("Turn fields need retention_mode=\"turn_budget\"", {"fields": sorted(turn_fields)})
    if req.retention_mode is not None and req.keep_recent_count is not None:
        raise InvalidArgument("keep_recent_count is the legacy mode; do not combine it with turn_budget")


def plan(root: list[session_msgs.Message], req: session_msgs.CommitRequest) -> turns.RetentionPlan:
    if req.retention_mode == "turn_budget":
        opts = {k: getattr(req, k) if getattr(req, k) is not None else v for k, v in TURN_DEFAULTS.items()}
        return turns.plan_retention(root, opts["keep_recent_turn_count"], opts["retained_message_token_budget"],
                                    opts["min_raw_tail_steps"])
    return turns.plan_keep_recent(root, req.keep_recent_count or 0)


class Phase1Bus(Events, WorkQueue, Protocol):
    """The bus ports commit Phase 1 uses: its event, and the Phase 2 job."""


class Phase1:
    """Commit Phase 1: archive what the retention plan lets go, durably, then queue Phase 2."""

    def __init__(self, bus: Phase1Bus, fence: Callable[[str], None], clock: Callable[[], float],
                 admission: Admission) -> None:
        self.bus = bus
        self.fence = fence
        self.clock = clock
        self.admission = admission
        self._later: set[asyncio.Task[None]] = set()  # Phase 2 jobs JetStream could not take at commit time

    async def commit(self, key: str, st: State, req: session_msgs.CommitRequest,
                     ctx: Ctx) -> tuple[session_msgs.CommitResult, Work | None]:
        """The reply, and what must run after it before the session's next request (None when
        nothing was archived, or when the caller waits for Phase 2 and it ran already)."""
        sdir = st.sdir
        if not st.root:
            return session_msgs.CommitResult(session_id=sdir.session_id, status="skipped",
                                             reason="no live messages"), None
        root = await self.admission.externalize(key, st)
        if root is not st.root:  # externalised outputs are kept whatever the plan decides
            await self.admission.replace_root(key, st, root)
        retention = plan(root, req)
        if not retention.archive_messages:
            return session_msgs.CommitResult(session_id=sdir.session_id, status="skipped",
                                             plan=msgspec.to_builtins(retention),
                                             reason="the retention policy keeps every live message"), None
        archive_ids = set(retention.archive_messages)
        archived = [m for m in root if m.id in archive_ids]
        retained = [m for m in root if m.id not in archive_ids]
        index = st.max_index + 1
        name = session_store.archive_name(index)
        uri = sdir.archive_uri(name)
        requests = []
        if retention.checkpoint_source_message_ids:
            requests.append(CheckpointRequest(index=0, turn_anchor_message_id=retention.turn_anchor,
                                              source_message_ids=retention.checkpoint_source_message_ids,
                                              budget_tokens=CHECKPOINT_BUDGET_TOKENS))
        meta = ArchiveMeta(archive_id=name, session_id=sdir.session_id, created_at=self.clock(),
                           retention_plan=msgspec.to_builtins(retention), checkpoint_requests=requests)
        self.fence(key)
        await asyncio.to_thread(session_store.create_archive, sdir, index, archived, meta)
        st.max_index = index
        faults.point("commit.after_archive")
        ctx.decided()  # the commit rolls forward from here: its journal entry goes beside the job
        job = session_msgs.Phase2Job(account=ctx.identity.account, user=ctx.identity.user,
                                     session_id=sdir.session_id, archive_id=name)
        waiters = contextlib.AsyncExitStack()
        async with waiters:
            w = indexed = None
            if req.wait:  # listening before the job is queued, so neither event can come first
                w = await waiters.enter_async_context(self.bus.waiter(f"archive.finished.{key}.{name}"))
                jid = memories_job_id(ctx.identity.account, ctx.identity.user, sdir.session_id, name)
                indexed = await waiters.enter_async_context(
                    self.bus.waiter(subjects.ingest_done(ctx.identity.account, jid)))
            # The archive is durable: from here the commit rolls forward. A job JetStream cannot take
            # now (a leader election) is queued again in the background (deduplicated by its URI).
            try:
                await self.bus.enqueue(catalog.ARCHIVE, job, uri)
            except Unavailable as e:
                log.warning("Phase 2 job for %s not queued yet (%s); retrying in the background", uri, e)
                task = asyncio.create_task(self._enqueue_later(job, uri))
                self._later.add(task)
                task.add_done_callback(self._later.discard)
            faults.point("commit.after_enqueue")
            st.root = retained
            st.commit_count += 1
            event = session_msgs.CommitResult(session_id=sdir.session_id, status="accepted", archive_uri=uri,
                                              archive_id=name, archived_messages=len(archived),
                                              retained_messages=len(retained))
            tail = functools.partial(self._tidy, key, st, list(retained), event)
            waited: dict[str, Any] = {}
            if w is not None and indexed is not None:  # the caller waits for Phase 2 anyway: tidy first
                await tail()
                waited = await _phase2_outcome(w, indexed, ctx)
        return msgspec.structs.replace(event, plan=msgspec.to_builtins(retention), **waited), \
            (None if w is not None else tail)

    async def _tidy(self, key: str, st: State, retained: list[session_msgs.Message],
                    event: session_msgs.CommitResult) -> None:
        """Root without the archived messages, then the `session.committed` notification. The
        session's meta is not rewritten: its counters are read back from the archives and the
        messages at load (recovery.load), which saves a durable rename per commit."""
        faults.point("commit.before_root")  # answered (or on its way), root still holding the archived
        self.fence(key)
        await asyncio.to_thread(session_store.write_live, st.sdir, retained)
        faults.point("commit.after_root")
        try:
            await self.bus.publish_event(f"session.committed.{key}", event, event.archive_uri or "")
        except Unavailable as e:  # a notification: the commit itself is done
            log.warning("session.committed for %s not published (%s)", event.archive_uri, e)

    async def _enqueue_later(self, job: session_msgs.Phase2Job, uri: str) -> None:
        pause = 1.0
        while True:
            await asyncio.sleep(pause)
            try:
                await self.bus.enqueue(catalog.ARCHIVE, job, uri)
                return
            except Unavailable:
                pause = min(pause * 2, 30.0)


async def _phase2_outcome(finished: Waiter, indexed: Waiter, ctx: Ctx) -> dict[str, Any]:
    """What a commit that waits reports: Phase 2's state, then whether the memories it wrote are
    findable (`memories`: indexed, failed, none, or pending when the deadline came first) and the
    index sequence that makes the caller's next search see them."""
    raw = await finished.wait(max(0.0, ctx.remaining() - 0.2))
    done = msgspec.json.decode(raw) if raw else {}
    out: dict[str, Any] = {"phase2": done.get("state", "pending")}
    if out["phase2"] != "completed":
        return out
    if not done.get("memory_job"):
        return {**out, "memories": "none"}
    raw = await indexed.wait(max(0.0, ctx.remaining() - 0.2))
    if not raw:
        return {**out, "memories": "pending"}
    job = msgspec.json.decode(raw)
    status = "indexed" if job.get("status") == "done" else "failed"
    return {**out, "memories": status, "index_seq": int(job.get("index_seq") or 0)}
