"""search (mode="list"): plan queries from the session, run one retrieval per planned query
concurrently (THINKING descent, keywords, or hybrid), aggregate with the plan and trajectory."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from skald.actors.kit.request import Ctx
from skald.actors.retriever import hierarchy as H
from skald.actors.retriever import params as P
from skald.actors.retriever import results as Rs
from skald.actors.retriever.fusion import rrf
from skald.actors.text import intent as I
from skald.actors.text.tags import check_tags
from skald.messages import search as Q
from skald.messages.errors import InvalidArgument
from skald.messages.index import IndexRow
from skald.store import sessions as session_files
from skald.store.index import Query
from skald.store.uri import check_name

if TYPE_CHECKING:
    from skald.actors.retriever.handlers import Retriever


@dataclass(slots=True)
class SearchSettings:
    default_mode: str = "thinking"  # thinking | fast
    alpha: float = 1.0
    hotness_alpha: float = 0.0
    enable_intent: bool = True
    intent_timeout_s: float = 5.0
    rerank_timeout_s: float = 5.0


@dataclass(slots=True)
class Counters:
    rerank_used: bool = False
    rerank_fallback: bool = False


async def session_context(retr: Retriever, session_id: str | None, ctx: Ctx) -> tuple[str, list[tuple[str, str]]]:
    if not session_id:
        return "", []
    check_name("session_id", session_id)
    vp = retr.ns.resolve(f"viking://~/sessions/{session_id}", ctx.identity)
    overview = await asyncio.to_thread(session_files.latest_overview, vp.path)
    recent = await asyncio.to_thread(session_files.recent_messages, vp.path, I.MAX_RECENT_MESSAGES)
    return overview, recent


async def run_search(retr: Retriever, req: Q.SearchRequest, ctx: Ctx) -> Q.FindResult:
    t0 = time.perf_counter()
    s: SearchSettings = retr.settings
    c = P.common(req, retr.clock(), check_tags)
    if req.search_type != "semantic" and not req.query.strip():
        raise InvalidArgument(f"search_type={req.search_type} needs a non-empty text query", {"field": "query"})
    now, levels, ctypes, since, until, decay, pred, limit = (c.now, c.levels, c.context_types, c.since, c.until,
                                                             c.decay, c.predicate, c.limit)
    prefixes = retr._targets(req.target_uri, ctypes, ctx.identity)
    summary, recent = await session_context(retr, req.session_id, ctx)
    if not req.query.strip():
        plan = I.QueryPlan(queries=[], status="off")
    elif s.enable_intent and req.search_type == "semantic" and req.query_expansion != "off":
        plan = await I.analyze(retr.llm, req.query, summary, recent, min(s.intent_timeout_s, ctx.remaining()))
    else:
        plan = I.original(req.query, "off")
    await retr._catch_up(ctx)
    counters = Counters()

    async def one(tq: I.TypedQuery) -> tuple[list[tuple[IndexRow, float]], dict[str, Any]]:
        qtypes = ctypes
        if tq.context_type is not None:
            qtypes = frozenset({tq.context_type}) if ctypes is None else ctypes & {tq.context_type}
            if not qtypes:
                return [], {"query": tq.query, "skipped": "context_type outside the request's"}
        scope_prefixes = prefixes if tq.context_type is None or req.target_uri else \
            retr._targets("", qtypes, ctx.identity)
        collect = Query(account=ctx.identity.account, prefixes=scope_prefixes, levels=levels, context_types=qtypes,
                        since=since, until=until, time_field=req.time_field, predicate=pred)
        if req.search_type == "keywords":
            hits = retr.index.keyword_search(tq.query, collect, limit)
            return [(h.row, h.score) for h in hits], {"query": tq.query, "engine": "bm25"}
        vec = await retr.embedder.embed_query(tq.query)
        k = limit * (P.EVENT_DECAY_OVERFETCH if decay is not None else 1)
        if req.search_type == "hybrid":
            vhits, _ = retr.index.search(vec, collect, max(k * 2, 20))
            khits = retr.index.keyword_search(tq.query, collect, max(k * 2, 20))
            fused = rrf([(h.row, h.score) for h in vhits], [(h.row, h.score) for h in khits])
            return fused[:k], {"query": tq.query, "engine": "hybrid-rrf", "vector": len(vhits),
                               "keywords": len(khits)}
        if s.default_mode == "fast":
            hits, trace = retr.index.search(vec, collect, k)
            return [(h.row, h.score) for h in hits], {"query": tq.query, "engine": trace.engine, "mode": "quick"}
        scope = Query(account=ctx.identity.account, prefixes=scope_prefixes, context_types=qtypes)
        out = await H.thinking(retr.index, vec, tq.query, scope, collect, scope_prefixes,
                               H.Params(limit=k, threshold=req.score_threshold, score_gte=req.score_gte,
                                        alpha=s.alpha, hotness_alpha=s.hotness_alpha, now=now,
                                        trace=req.include_provenance),
                               retr.rerank_fn(min(s.rerank_timeout_s, max(0.1, ctx.remaining() / 2))))
        counters.rerank_used |= out.rerank_used
        counters.rerank_fallback |= out.rerank_fallback
        return out.hits[:k], {"query": tq.query, "mode": "thinking", "trajectory": out.trace}

    results = await asyncio.gather(*(one(tq) for tq in plan.queries))
    matched: list[Q.MatchedContext] = []
    provenance: list[dict[str, Any]] = []
    for hits, prov in results:
        provenance.append(prov)
        for row, score in hits:
            m = Rs.to_matched(row, score)
            if decay is not None and P.is_event(row) and req.search_type != "keywords":
                ts = P.time_score(row.updated_at, now, decay)
                m.origin_score, m.time_score = m.score, round(ts, 6)
                m.score = round(score * ts, 6)
            if req.search_type == "semantic" and not Rs.passes(m.score, req.score_threshold, req.score_gte):
                continue
            matched.append(m)
    # list mode aggregates every planned query's results: the total may exceed `limit`.
    result = Rs.group(matched, limit * max(1, len(plan.queries)))
    result.query_plan = msgspec.to_builtins(plan)
    if req.read_content:
        await retr._inline_content(result, ctx.identity)
    if req.include_provenance:
        result.provenance = {"targets": prefixes, "search_type": req.search_type, "queries": provenance,
                             "session_context": {"overview_chars": len(summary), "messages": len(recent)}}
    latency = (time.perf_counter() - t0) * 1000
    scores = [m.score for m in (*result.memories, *result.resources, *result.skills)]
    retr.stats.record(",".join(sorted(ctypes)) if ctypes else "all", scores, latency,
                      rerank_used=counters.rerank_used, rerank_fallback=counters.rerank_fallback)
    return result
