"""The assembler actor: `search(mode="context" | "bootstrap")` and the `recall` preset.

The pipeline (docs/design/context-assembly.md): candidates (retrieval hits by bucket, or the bootstrap manifest)
-> dedup (ledger + exclude_uris, applied by the retriever before limits are cut) -> tier
planning (no I/O) -> reads (concurrent, bounded, only what can fit) -> fill -> render ->
optional digest -> ledger write -> stats. The pure stages live in their own modules; this file
does the I/O around them. Every model call sits behind a timeout fuse and degrades, never fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from skald.actors.assembler import (
    bootstrap,
    budget,
    ledger,
    pipeline,
    reads,
    selection,
    textcache,
    tiers,
)
from skald.actors.assembler import digest as digest_mod
from skald.actors.assembler import params as params_mod
from skald.actors.kit.clock import now as clock_now
from skald.actors.kit.decl import handles
from skald.actors.kit.ports import LLM, Calls, UsageLog
from skald.actors.kit.request import Ctx
from skald.actors.text import intent
from skald.messages import catalog, errors
from skald.messages import context as context_msgs
from skald.messages import search as search_msgs
from skald.messages.sessions import CreateRequest, SessionRef
from skald.store import faults, treeops
from skald.store import sessions as session_store
from skald.store.sessions import SessionDir, session_dir
from skald.store.treeport import StoreUnavailable
from skald.store.uri import Identity, Namespace, check_name, node_of

log = logging.getLogger("skald.assembler")
READ_CONCURRENCY = 8
USES_FLUSH_S = 0.25  # served memories' use counts wait this long to be published together
USES_ATTEMPTS = 3  # a flush the stream did not take in time is sent again (a busy or electing JetStream)


class AssemblerBus(Calls, UsageLog, Protocol):
    """The bus ports the assembler uses: calls to the retriever and session actors, use counts."""


@dataclass(slots=True)
class SessionView:
    """What assembly reads of a session: its directory, its turn clock, its overview and recent messages."""

    sdir: SessionDir
    clock: int
    overview: str
    recent: list[tuple[str, str]]
    created: bool = False  # it did not exist: this request created it


class Assembler:
    """The assembler actor: search in context and bootstrap modes and the recall preset, one ready-to-inject block
    per call."""

    def __init__(self, ns: Namespace, bus: AssemblerBus, llm: LLM, *, intent_timeout_s: float = 5.0,
                 rewrite_timeout_s: float = 30.0, clock: Callable[[], float] = clock_now) -> None:
        self.ns = ns
        self.bus = bus
        self.llm = llm
        self.texts = textcache.TextCache()
        self.intent_timeout_s = intent_timeout_s
        self.rewrite_timeout_s = rewrite_timeout_s
        self.clock = clock
        self._uses: dict[str, Counter[str]] = {}  # account -> node -> uses served, not yet published
        self._flush: asyncio.Task[None] | None = None
        self.uses_counted = 0
        self.uses_failed = 0

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "llm": self.llm.name, "uses_counted": self.uses_counted,
                "uses_failed": self.uses_failed, "text_cache": self.texts.stats()}

    async def stop(self) -> None:
        if self._flush is not None:
            await asyncio.gather(self._flush, return_exceptions=True)

    def _count_served(self, entries: list[context_msgs.ContextEntry], ident: Identity) -> int:
        """Memories served in a block are used once more (their active_count); counted off the
        reply's path, a failure only logged: a use count is worth less than the answer's time.
        Uses served within USES_FLUSH_S are published together, one counter message per node
        (a block of 50 memories was 50 JetStream publishes on the worker's loop, every request)."""
        nodes = [node_of(e.uri, ident) for e in entries if e.category in tiers.MEMORY_CATEGORIES]
        if not nodes:
            return 0
        self._uses.setdefault(ident.account, Counter()).update(dict.fromkeys(nodes, 1))  # once per block
        if self._flush is None:
            self._flush = asyncio.create_task(self._publish_uses(), name="count-served")
        return len(nodes)

    async def _publish_uses(self) -> None:
        await asyncio.sleep(USES_FLUSH_S)
        pending, self._uses, self._flush = self._uses, {}, None
        for account, counts in pending.items():
            n, msg_id = sum(counts.values()), uuid.uuid4().hex
            for attempt in range(USES_ATTEMPTS):
                try:  # the same message id again: counters the stream already took are not added twice
                    await self.bus.add_usage(account, dict(counts), msg_id)
                    self.uses_counted += n
                    break
                except Exception as e:  # noqa: BLE001 - reported in health, never to the caller
                    if attempt + 1 < USES_ATTEMPTS:
                        await asyncio.sleep(USES_FLUSH_S * 4)
                        continue
                    self.uses_failed += n
                    log.warning("use counts of %d served memories not recorded: %s", n, e)

    @handles(catalog.ASSEMBLE_CONTEXT, timeout_s=120.0)
    async def context(self, req: search_msgs.SearchRequest, ctx: Ctx) -> context_msgs.ContextResult:
        """`assemble.context`: search.search in context or bootstrap mode, served by the assembler."""
        return await self.assemble(params_mod.resolve(req, params_mod.SEARCH), ctx, bool(req.telemetry))

    @handles(catalog.SEARCH_RECALL, timeout_s=120.0)
    async def recall(self, req: search_msgs.RecallRequest, ctx: Ctx) -> context_msgs.ContextResult:
        """`search.recall`: The auto-recall preset of context assembly."""
        params = params_mod.resolve(req, params_mod.RECALL)
        ctx.deprecated.extend(params.deprecated)
        return await self.assemble(params, ctx, bool(req.telemetry))

    # ----- pipeline ---------------------------------------------------------------------

    async def assemble(self, p: params_mod.Params, ctx: Ctx, telemetry: bool = False) -> context_msgs.ContextResult:
        """The pipeline's I/O around its pure steps (`pipeline.py`): the session and its ledger,
        candidates (or the bootstrap manifest), transcripts and file texts, the digest, the ledger
        written back."""
        t0 = ts = time.perf_counter()
        timing: dict[str, float] = {}
        session = await self._session(p, ctx)
        records: dict[str, ledger.Record] = {}
        dedup: dict[str, Any] = {"turns": p.dedup_turns, "status": "off"}
        if p.dedup_turns and session is not None:
            raw = await asyncio.to_thread(session_store.read_json, session.sdir.tree, session.sdir.fkey(ledger.NAME))
            records, bad = ledger.parse(raw)
            dedup.update(status="ok", turn=session.clock, malformed=bad)
        cooled = sorted(ledger.cooled(records, session.clock, p.dedup_turns)) if session is not None else []
        queries: list[str] | None = None
        unread: list[str] = []  # what the store did not answer for: served from what the index holds
        if p.mode == "bootstrap":
            slots, retrieval = await self._bootstrap(p, ctx, session, set(cooled))
            expansion, ts = "off", time.perf_counter()
        else:
            queries, expansion = await self._expand(p, session)
            ts = time.perf_counter()
            retrieval = await self._candidates(p, ctx, queries, cooled)
            ts = pipeline.timed(timing, "retrieve_ms", ts, time.perf_counter)
            timing.update(embed_ms=retrieval.embed_ms, search_ms=retrieval.search_ms, shape_ms=retrieval.shape_ms)
            docs = reads.turn_documents(retrieval.buckets)
            scripts = (await asyncio.to_thread(reads.transcripts, self.ns, self.texts, docs, ctx.identity, unread)
                       if docs else {})
            chosen = pipeline.choose(retrieval.buckets, scripts, p)
            ts = pipeline.timed(timing, "group_ms", ts, time.perf_counter)
            slots = await self._slots(chosen, p, ctx.identity, unread)
            ts = pipeline.timed(timing, "read_ms", ts, time.perf_counter)
        block = pipeline.fill(slots, p.max_tokens)
        ts = pipeline.timed(timing, "fill_ms", ts, time.perf_counter)
        digest, rewrite, usage = await self._rewrite(p, block.entries, block.rendered, session)
        pipeline.timed(timing, "rewrite_ms", ts, time.perf_counter)
        rendered, uses = block.rendered, None
        if rewrite == "no_relevant":
            rendered = ""
        else:
            uses = self._count_served(block.entries, ctx.identity)
        if rewrite != "no_relevant" and p.dedup_turns and session is not None:
            new = ledger.update(records, [(e.uri, e.detail) for e in block.entries], session.clock, p.dedup_turns,
                                self.clock())
            try:
                faults.point("ledger.before_write")
                await asyncio.to_thread(session_store.write_json, session.sdir.tree, session.sdir.fkey(ledger.NAME),
                                        ledger.dump(new))
            except OSError as e:
                dedup["status"] = "write_failed"
                log.warning("dedup ledger write failed: %s", e)
        if telemetry:
            timing["total_ms"] = (time.perf_counter() - t0) * 1000
            timing["own_ms"] = timing["total_ms"] - timing.get("embed_ms", 0.0) - timing.get("rewrite_ms", 0.0)
        stats = pipeline.stats_of(
            block, p, retrieval, query_expansion=expansion, planned_queries=queries, rewrite=rewrite,
            rewrite_usage=usage, dedup=dedup, uses_counted=uses, unread=unread,
            instructions_hash=bootstrap.INSTRUCTIONS_HASH if p.mode == "bootstrap" else None,
            telemetry={k: round(v, 3) for k, v in timing.items()} if telemetry else None,
            session_created=session is not None and session.created)
        return context_msgs.ContextResult(entries=block.entries, rendered=rendered, digest=digest, stats=stats)

    async def _session(self, p: params_mod.Params, ctx: Ctx) -> SessionView | None:
        """The session, created on first use (docs/design/retrieval-api.md); its clock from its owner."""
        if not p.session_id:
            return None
        check_name("session_id", p.session_id)
        sdir = session_dir(self.ns, ctx.identity, p.session_id)
        timeout = max(0.5, min(5.0, ctx.remaining() / 4))
        try:
            info = await self.bus.call(catalog.SESSIONS_GET, SessionRef(session_id=p.session_id), ctx.identity, timeout)
        except errors.NotFound:
            with contextlib.suppress(errors.Conflict):
                await self.bus.call(catalog.SESSIONS_CREATE, CreateRequest(session_id=p.session_id), ctx.identity,
                                    timeout)
            info = {"total_message_count": 0, "created": True}
        need_text = p.mode == "bootstrap" or p.query_expansion == "auto" or p.rewrite is not False
        overview, recent = "", []
        if need_text:  # side by side: each a round trip on the JetStream tree
            overview, recent = await asyncio.gather(
                asyncio.to_thread(session_store.latest_overview, sdir),
                asyncio.to_thread(session_store.recent_messages, sdir, intent.MAX_RECENT_MESSAGES))
        return SessionView(sdir=sdir, clock=int(info.get("total_message_count", 0)),
                           overview=overview, recent=recent, created=bool(info.get("created")))

    async def _expand(self, p: params_mod.Params, session: SessionView | None) -> tuple[list[str], str]:
        """L1: one bounded intent call, at most three queries, the original first. Without one
        (no model, no session to read), a question comparing two names is still asked of each
        (`intent.offline`: no model needed), said as "split"."""
        if p.query_expansion == "off":
            return [p.query], "off"
        if session is None or self.llm.extractive or not (session.overview or session.recent):
            offline = intent.offline(p.query)
            if offline.status == "split":
                return [q.query for q in offline.queries], "split"
            return [p.query], "off" if session is None else "skipped"
        plan = await intent.analyze(self.llm, p.query, session.overview, session.recent, self.intent_timeout_s)
        status = {"planned": "used", "timeout": "timeout", "failed": "failed"}.get(plan.status, "skipped")
        queries = list(dict.fromkeys([p.query, *(q.query for q in plan.queries)]))[: intent.MAX_QUERIES]
        return queries, status

    async def _candidates(self, p: params_mod.Params, ctx: Ctx, queries: list[str],
                          cooled: list[str]) -> context_msgs.CandidatesResult:
        cooled_prefixes = [u[: -len("/SKILL.md")] for u in cooled if u.endswith("/SKILL.md")]
        req = context_msgs.CandidatesRequest(
            queries=queries, buckets=selection.buckets(p.quotas, p.limit), score_threshold=p.score_threshold,
            score_gte=p.score_gte, exclude_uris=p.exclude_uris, cooled_uris=cooled, cooled_prefixes=cooled_prefixes,
            peer_scope=p.peer_scope, other_peer_penalty=p.other_peer_penalty, **p.filters)  # type: ignore[arg-type]
        try:
            got: context_msgs.CandidatesResult = await self.bus.call(
                catalog.SEARCH_CANDIDATES, req, ctx.identity, max(0.5, ctx.remaining() * 0.6),
                index_seq=ctx.index_seq, into=context_msgs.CandidatesResult)
        except (errors.InvalidArgument, errors.PermissionDenied):
            raise  # the request is wrong: say so, as list mode does (docs/design/context-assembly.md, finding 12)
        except errors.SkaldError as e:
            return context_msgs.CandidatesResult(buckets={}, errors={"retrieval": f"{e.code}: {e.message}"})
        return got

    async def _slots(self, chosen: list[context_msgs.Candidate], p: params_mod.Params,
                     ident: Identity, unread: list[str]) -> list[budget.Slot]:
        """Plan tiers without I/O, then read only what may be served and can fit. A file the store
        does not answer for is served from what its candidate holds and added to `unread`."""
        slots = []
        for c in chosen:
            pinned = p.detail.get(c.category)
            start, deepest = tiers.bounds(c.category, c.is_dir, pinned)
            texts = {"abstract": c.abstract} if c.abstract else {}
            if c.text and c.is_dir:
                texts["overview"] = c.text  # a long document's table of contents
            elif c.text:
                texts["full"] = c.text  # a section: the passage itself is what is served
                if pinned is None:
                    start = deepest = "full"
            slots.append(budget.Slot(uri=c.uri, category=c.category, score=c.score, is_dir=c.is_dir, start=start,
                                 deepest=deepest, texts=texts, origin=c.origin, location=c.location,
                                 bounded=c.lines is not None))
        plan = budget.read_plan(slots, p.max_tokens)
        todo = [(s, what) for s, what in zip(slots, plan, strict=True) if what]
        if not todo:
            return slots

        def look_up() -> list[tuple[str, bool] | tuple[str, int, int] | None]:
            """Each file's body from the cache when unchanged since it was read, else where to read it."""
            out: list[tuple[str, bool] | tuple[str, int, int] | None] = []
            uris = [s.uri for s, _ in todo]
            try:
                stated = reads.cached(self.ns, self.texts, uris, ident)
            except StoreUnavailable:
                unread.extend(uris)
                return [None] * len(uris)
            for got in stated:
                if got is None:
                    out.append(None)
                    continue
                key, st, body = got
                out.append((key, treeops.mtime_ns(st), st.size) if body is None else
                           (body.text, body.whole and st.size // 8 <= p.max_tokens))
            return out

        found = await asyncio.to_thread(look_up)
        misses = [i for i, f in enumerate(found) if f is not None and len(f) == 3]

        def read_chunk(chunk: list[int]) -> list[tuple[str, bool]]:
            out = []
            for i in chunk:
                try:
                    out.append(reads.read(self.ns.tree, self.texts, *found[i], p.max_tokens))  # type: ignore[misc]
                except StoreUnavailable:
                    unread.append(todo[i][0].uri)
                    out.append(("", False))
            return out

        # Small files read faster in a row than one thread hop each: at most READ_CONCURRENCY
        # threads, each reading its share in score order.
        chunks = [misses[i::READ_CONCURRENCY] for i in range(min(READ_CONCURRENCY, len(misses)))]
        for chunk, got in zip(chunks, await asyncio.gather(*(asyncio.to_thread(read_chunk, ch) for ch in chunks)),
                              strict=True):
            for i, body in zip(chunk, got, strict=True):
                found[i] = body
        for (s, what), f in zip(todo, found, strict=True):
            if not f or not f[0]:
                continue
            text, whole = f  # type: ignore[misc]
            if what == "dir_overview":
                s.texts["overview"] = text
                continue
            s.texts["overview"] = tiers.file_overview(s.uri.rsplit("/", 1)[-1], text)
            if whole:
                s.texts["full"] = text
        return slots

    async def _rewrite(self, p: params_mod.Params, entries: list[context_msgs.ContextEntry], rendered: str,
                       session: SessionView | None) -> tuple[str, str, dict[str, int] | None]:
        """L3: (digest, status, usage). Failure of any kind keeps the rendered block."""
        enabled = p.rewrite is True or (p.rewrite == "auto" and not self.llm.extractive)
        if not enabled:
            return "", "off", None
        served = {e.uri for e in entries}
        if self.llm.extractive:
            return digest_mod.extractive([(e.uri, e.text) for e in entries if e.text],
                                         p.rewrite_max_bullets), "ok", None
        slice_ = digest_mod.session_slice(session.overview, [t for r,
                                                             t in session.recent if r == "user"]) if session else ""
        try:
            c = await asyncio.wait_for(
                self.llm.complete(digest_mod.SYSTEM.format(n=p.rewrite_max_bullets),
                                  digest_mod.prompt(p.query, rendered, slice_),
                                  max_tokens=60 * p.rewrite_max_bullets + 100, timeout_s=self.rewrite_timeout_s),
                self.rewrite_timeout_s)
        except TimeoutError:
            return "", "timeout", None
        except Exception as e:  # noqa: BLE001 - degraded, reported in stats
            log.warning("digest rewrite failed: %s", e)
            return "", "failed", None
        usage = {"prompt_tokens": c.usage.prompt_tokens, "completion_tokens": c.usage.completion_tokens}
        if digest_mod.is_no_relevant(c.text):
            return "", "no_relevant", usage
        digest = digest_mod.normalise(c.text, served, p.rewrite_max_bullets)
        return (digest, "ok", usage) if digest else ("", "failed", usage)

    async def _bootstrap(self, p: params_mod.Params, ctx: Ctx, session: SessionView | None,
                         cooled: set[str]) -> tuple[list[budget.Slot], context_msgs.CandidatesResult]:
        manifest = await asyncio.to_thread(bootstrap.manifest, self.ns, ctx.identity, session.sdir if session else None,
                                           self.clock())
        slots = [budget.Slot(uri=m.uri, category=m.slot, score=1.0, is_dir=False, start=m.start, deepest=m.deepest,
                         texts=m.texts) for m in manifest if m.uri not in cooled]
        return slots, context_msgs.CandidatesResult(buckets={}, cooled=len(manifest) - len(slots))
