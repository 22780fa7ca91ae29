"""search (mode="list"): plan queries from the session, run one retrieval per planned query
concurrently (THINKING descent, keywords, or hybrid), aggregate with the plan and trajectory.

It takes what it needs as one narrow `ListSearch` object (the replica, the models, settings,
stats), not the actor: the retriever builds it once and hands it over."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from skald.actors.kit.ports import LLM, Embedder
from skald.actors.kit.request import Ctx
from skald.actors.retriever import hierarchy, params, scope
from skald.actors.retriever import results as results_mod
from skald.actors.retriever.calibration import IDENTITY, Calibration
from skald.actors.retriever.query_vectors import query_vectors
from skald.actors.retriever.reads import inline_content
from skald.actors.retriever.replica import IndexReplica
from skald.actors.retriever.scoring import answered, decayed_match, decayed_score, gate_of, hybrid
from skald.actors.retriever.shards import sent_vector, wire_vector
from skald.actors.retriever.stats import StatsCollector
from skald.actors.text import intent
from skald.actors.text.tags import check_tags
from skald.messages import search as search_msgs
from skald.messages.errors import InvalidArgument
from skald.messages.index import IndexRow
from skald.store import sessions as session_store
from skald.store.index import Hit, Query
from skald.store.uri import Namespace, check_name

RerankFn = Callable[[str, list[str]], Awaitable[list[float] | None]]


@dataclass(slots=True)
class SearchSettings:
    """How list search runs in this deployment: default mode, propagation and hotness weights, intent, rerank,
    calibration."""

    default_mode: str = "thinking"  # thinking | fast
    alpha: float = 1.0
    hotness_alpha: float = 0.0
    enable_intent: bool = True
    intent_timeout_s: float = 5.0
    rerank_timeout_s: float = 5.0
    calibration: Calibration = IDENTITY  # what callers see of a similarity (calibration.py)


@dataclass(slots=True)
class Counters:
    """What one list search used: whether rerank ran and whether it fell back."""

    rerank_used: bool = False
    rerank_fallback: bool = False


@dataclass(frozen=True, slots=True)
class ListSearch:
    """What list search uses of the retriever."""

    ns: Namespace
    replica: IndexReplica
    embedder: Embedder
    llm: LLM
    settings: SearchSettings
    stats: StatsCollector
    clock: Callable[[], float]
    rerank: Callable[[float], RerankFn | None]  # the reranker under a timeout, or None
    usage: results_mod.Uses  # use counts (active_count), which hotness ranks by


async def session_context(ns: Namespace, session_id: str | None, ctx: Ctx) -> tuple[str, list[tuple[str, str]]]:
    if not session_id:
        return "", []
    check_name("session_id", session_id)
    sdir = session_store.session_dir(ns, ctx.identity, session_id)
    overview, recent = await asyncio.gather(  # side by side: each a round trip on the JetStream tree
        asyncio.to_thread(session_store.latest_overview, sdir),
        asyncio.to_thread(session_store.recent_messages, sdir, intent.MAX_RECENT_MESSAGES))
    return overview, recent


@dataclass(slots=True)
class Planned:
    """A list search's plan, made once: the queries, each one's vector where it was embedded
    (None: embed it where it runs), and the size of the session context it was planned from."""

    plan: intent.QueryPlan
    vectors: list[np.ndarray | None]
    overview_chars: int = 0
    messages: int = 0


async def plan_search(retr: ListSearch, req: search_msgs.SearchRequest, ctx: Ctx, embed: bool = False) -> Planned:
    """The queries a list search runs, from its session (intent analysis, a model call when one is
    configured); with `embed`, each query's vector too (what a search spanning shards sends them)."""
    s: SearchSettings = retr.settings
    if req.search_type != "semantic" and not req.query.strip():
        raise InvalidArgument(f"search_type={req.search_type} needs a non-empty text query", {"field": "query"})
    summary, recent = await session_context(retr.ns, req.session_id, ctx)
    if not req.query.strip():
        plan = intent.QueryPlan(queries=[], status="off")
    elif s.enable_intent and req.search_type == "semantic" and req.query_expansion != "off":
        plan = await intent.analyze(retr.llm, req.query, summary, recent, min(s.intent_timeout_s, ctx.remaining()))
    else:
        plan = intent.original(req.query, "off")
    vectors: list[np.ndarray | None] = [None] * len(plan.queries)
    if embed and req.search_type != "keywords":
        vectors = list(await query_vectors(retr.embedder, retr.replica.index, [tq.query for tq in plan.queries],
                                           [Query(account=ctx.identity.account)]))
    return Planned(plan, vectors, len(summary), len(recent))


def planned_from(req: search_msgs.ShardSearchRequest, embedder: Embedder) -> Planned:
    """The plan the asking retriever sent (a vector of another model or size embedded again here)."""
    plan = intent.QueryPlan(queries=[intent.TypedQuery(query=q.query, context_type=q.context_type, intent=q.intent,
                                                       priority=q.priority) for q in req.queries],
                            reasoning=req.reasoning, status=req.status, error=req.error)
    return Planned(plan, [sent_vector(q.vector, req.model, embedder) if q.vector else None for q in req.queries])


def shard_request(req: search_msgs.SearchRequest, planned: Planned, model: str) -> search_msgs.ShardSearchRequest:
    """What a shard is sent: the search, and the plan with its vectors."""
    p = planned.plan
    return search_msgs.ShardSearchRequest(
        search=req, reasoning=p.reasoning, status=p.status, error=p.error, model=model,
        queries=[search_msgs.PlannedQuery(query=q.query, context_type=q.context_type, intent=q.intent,
                                          priority=q.priority, vector=b"" if v is None else wire_vector(v))
                 for q, v in zip(p.queries, planned.vectors, strict=True)])


async def run_search(retr: ListSearch, req: search_msgs.SearchRequest, ctx: Ctx,
                     planned: Planned | None = None) -> search_msgs.FindResult:
    """One list search from this replica's rows: its plan made here, or the one given."""
    t0 = time.perf_counter()
    s: SearchSettings = retr.settings
    c = params.common(req, retr.clock(), check_tags)
    now, levels, ctypes, since, until, decay, pred, limit = (c.now, c.levels, c.context_types, c.since, c.until,
                                                             c.decay, c.predicate, c.limit)
    prefixes = scope.targets(retr.ns, req.target_uri, ctypes, ctx.identity)
    if planned is None:
        planned = await plan_search(retr, req, ctx)
    plan = planned.plan
    await retr.replica.catch_up(ctx)
    index = retr.replica.index
    counters = Counters()

    async def one(tq: intent.TypedQuery, given: np.ndarray | None) -> tuple[list[tuple[IndexRow, float]],
                                                                             dict[str, Any]]:
        qtypes = ctypes
        if tq.context_type is not None:
            qtypes = frozenset({tq.context_type}) if ctypes is None else ctypes & {tq.context_type}
            if not qtypes:
                return [], {"query": tq.query, "skipped": "context_type outside the request's"}
        scope_prefixes = prefixes if tq.context_type is None or req.target_uri else \
            scope.targets(retr.ns, "", qtypes, ctx.identity)
        collect = Query(account=ctx.identity.account, prefixes=scope_prefixes, levels=levels, context_types=qtypes,
                        since=since, until=until, time_field=req.time_field, predicate=pred)
        if req.search_type == "keywords":
            hits = index.keyword_search(tq.query, collect, limit)
            return [(h.row, h.score) for h in hits], {"query": tq.query, "engine": "bm25"}
        vec = given if given is not None else (await query_vectors(retr.embedder, index, [tq.query], [collect]))[0]
        k = limit * (params.EVENT_DECAY_OVERFETCH if decay is not None else 1)
        if req.search_type == "hybrid":
            # find's fusion (dense + keyword lift on the cosine scale), so scores stay calibrated
            # and a threshold means what it means elsewhere.
            def passes(h: Hit, margin: float) -> bool:
                gated = decayed_score(h.row, s.calibration.score(gate_of(h) - margin), decay, now)
                return results_mod.passes(gated, req.score_threshold, req.score_gte)

            hits = answered(hybrid(index, vec, tq.query, collect, k), passes)
            return [(h.row, h.score) for h in hits], {"query": tq.query, "engine": "hybrid"}
        if s.default_mode == "fast":
            hits, trace = index.search(vec, collect, k)
            return [(h.row, h.score) for h in hits], {"query": tq.query, "engine": trace.engine, "mode": "quick"}
        walk = Query(account=ctx.identity.account, prefixes=scope_prefixes, context_types=qtypes)
        out = await hierarchy.descend(index, vec, tq.query, walk, collect, scope_prefixes,
                               hierarchy.Params(limit=k, threshold=s.calibration.raw(req.score_threshold),
                                                score_gte=req.score_gte,
                                        alpha=s.alpha, hotness_alpha=s.hotness_alpha, now=now,
                                        trace=req.include_provenance,
                                        uses=lambda r: retr.usage.get(r.account, r.uri)),
                               retr.rerank(min(s.rerank_timeout_s, max(0.1, ctx.remaining() / 2))))
        counters.rerank_used |= out.rerank_used
        counters.rerank_fallback |= out.rerank_fallback
        return out.hits[:k], {"query": tq.query, "mode": "thinking", "trajectory": out.trace}

    results = await asyncio.gather(*(one(tq, v) for tq, v in zip(plan.queries, planned.vectors, strict=True)))
    matched: list[search_msgs.MatchedContext] = []
    raw: list[float] = []  # each match's similarity before calibration: what orders its ties
    provenance: list[dict[str, Any]] = []
    if not req.query.strip():  # no query: the rows the filters select, newest first, as find lists them
        listing = Query(account=ctx.identity.account, prefixes=prefixes, levels=levels, context_types=ctypes,
                        since=since, until=until, time_field=req.time_field, predicate=pred)
        matched = [results_mod.to_matched(r, 0.0, index.abstract_of(r)) for r in index.scan(listing, limit)]
        provenance.append({"query": "", "engine": "scan"})
    for hits, prov in results:
        provenance.append(prov)
        for row, score in hits:
            if req.search_type == "keywords":
                m = results_mod.to_matched(row, score, index.abstract_of(row))
            else:  # similarities (hybrid's on the same cosine scale), calibrated
                m = decayed_match(row, s.calibration.score(score), decay, now, index.abstract_of(row))
            if req.search_type == "semantic" and not results_mod.passes(m.score, req.score_threshold, req.score_gte):
                continue  # hybrid's hits passed their own gates above
            m.match_reason = prov["query"]  # which query found it, until `explain` says why
            matched.append(m)
            raw.append(score)
    # list mode aggregates every planned query's results: the total may exceed `limit`. Ordered by
    # score, ties by the raw similarity (the same scale for every planned query), so neither one
    # query's order nor several queries' merge falls into URI order where scores clip at 1.0.
    if raw:  # hits of queries (a listing without one keeps group's own order)
        matched = results_mod.by_score(matched, raw)
    result = results_mod.group(matched, limit * max(1, len(plan.queries)), ranked_input=bool(raw))
    account = ctx.identity.account
    results_mod.explain(result, req.query, "keywords" if req.search_type == "keywords" else "semantic",
                        lambda q, rows: index.words_in(q, account, rows),
                        lambda uri: results_mod.l1_overview(index.get(account, uri, 1)))
    results_mod.count_uses(result, retr.usage, account)
    result.query_plan = msgspec.to_builtins(plan)
    if req.read_content:
        await inline_content(retr.ns, result, ctx.identity)
    if req.include_provenance:
        result.provenance = {"targets": prefixes, "search_type": req.search_type, "queries": provenance,
                             "calibration": s.calibration.describe(),
                             "session_context": {"overview_chars": planned.overview_chars,
                                                 "messages": planned.messages}}
    latency = (time.perf_counter() - t0) * 1000
    scores = [m.score for m in (*result.memories, *result.resources, *result.skills)]
    signal = {"keywords": "bm25", "hybrid": "hybrid"}.get(req.search_type, "similarity")
    retr.stats.record(",".join(sorted(ctypes)) if ctypes else "all", scores, latency, path="search", signal=signal,
                      rerank_used=counters.rerank_used, rerank_fallback=counters.rerank_fallback)
    return result
