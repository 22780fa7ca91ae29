"""The retriever actor: find, search (list mode; context mode relayed to the assembler), the
candidates of context assembly, and the read side of the tree (`reads.py`), over this worker's
replica of the vector index (`replica.py`).

Thin: scope resolution is `scope.py`, time decay `scoring.py`, list search `list_search.py`,
candidate shaping `candidates.py`, descent `hierarchy.py`; this module gathers inputs and calls them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec
import numpy as np

from skald.actors.kit.decl import handles
from skald.actors.kit.overlap import overlapped
from skald.actors.kit.ports import LLM, Calls, Embedder, IndexLog, Reranker, ShardCalls, UsageLog
from skald.actors.kit.request import Ctx
from skald.actors.retriever import candidates, params, querybank, results, scope
from skald.actors.retriever.gather import gather
from skald.actors.retriever.list_search import (
    ListSearch,
    RerankFn,
    SearchSettings,
    plan_search,
    planned_from,
    run_search,
    shard_request,
)
from skald.actors.retriever.query_vectors import query_vectors
from skald.actors.retriever.reads import TreeReads, inline_content
from skald.actors.retriever.replica import IndexReplica
from skald.actors.retriever.scoring import (
    answered,
    decayed_match,
    decayed_score,
    gate_of,
    hybrid,
    keyword_hits,
)
from skald.actors.retriever.shards import Scatter, merge_candidates, merge_find, sent_vector, wire_vector
from skald.actors.retriever.stats import StatsCollector
from skald.actors.retriever.usage import UsageCounts
from skald.actors.text.tags import check_tags
from skald.messages import catalog
from skald.messages import context as context_msgs
from skald.messages import search as search_msgs
from skald.messages.errors import InvalidArgument
from skald.messages.system import Empty, StatsResult
from skald.store.index import Hit, Query, VectorIndex
from skald.store.index.shards import shards_for
from skald.store.uri import Namespace

log = logging.getLogger("skald.retriever")


class RetrieverBus(Calls, ShardCalls, IndexLog, UsageLog, Protocol):
    """The bus ports the retriever uses: its index replica follows the log, the use counters feed
    hotness, and a sharded index's other shards answer what this one does not hold."""


class Retriever(TreeReads):
    """The retriever actor: find, search (list), candidates for context assembly, grep, glob and fs reads, over its
    replica of the index."""

    def __init__(self, ns: Namespace, embedder: Embedder, bus: RetrieverBus, state_dir: Path, llm: LLM,
                 reranker: Reranker | None = None, settings: SearchSettings | None = None,
                 clock: Callable[[], float] = time.time, snapshot_interval_s: float = 30.0,
                 snapshot_maps_keywords: bool = False, vector_graph: str = "hnsw") -> None:
        self.ns = ns
        self.embedder = embedder
        self.llm = llm
        self.reranker = reranker
        self.settings = settings or SearchSettings()
        self.bus = bus
        self.clock = clock
        self.replica = IndexReplica(embedder.name, embedder.dim, bus, state_dir, snapshot_interval_s,
                                    snapshot_maps_keywords, vector_graph)
        self.usage = UsageCounts(bus)
        self.stats = StatsCollector()
        self.scatter = Scatter(bus, bus.index_shards, bus.index_shard)
        self.lists = ListSearch(ns=ns, replica=self.replica, embedder=embedder, llm=llm, settings=self.settings,
                                stats=self.stats, clock=clock, rerank=self.rerank_fn, usage=self.usage)

    @property
    def index(self) -> VectorIndex:
        return self.replica.index

    @property
    def serves_shard(self) -> int | None:
        """The shard of a sharded index this retriever holds (None: the whole index): the host also
        binds its handlers to that shard's subjects, where the other shards' retrievers ask it."""
        return self.scatter.mine if self.scatter.shards > 1 else None

    def spans(self, req: search_msgs.FindRequest, ctx: Ctx) -> list[int] | None:
        """The shards a search must ask, or None when this replica holds all it spans (an unsharded
        index, a request another shard's retriever sent on, a scope inside this shard)."""
        if self.scatter.shards <= 1 or ctx.forwarded:
            return None
        c = params.common(req, self.clock(), check_tags)
        prefixes = scope.targets(self.ns, req.target_uri, c.context_types, ctx.identity)
        targets = shards_for(ctx.identity.account, prefixes, self.scatter.shards)
        return None if targets == [self.scatter.mine] else targets

    async def start(self) -> None:
        await self.replica.start()
        await self.usage.start()
        cal = self.settings.calibration
        if cal.hub_beta:
            bank = np.stack([await self.embedder.embed_query(q) for q in querybank.QUESTIONS])
            self.replica.index.set_querybank(bank, cal.hub_beta)

    async def stop(self) -> None:
        await self.usage.stop()
        await self.replica.stop()

    def stop_grace_s(self) -> float:
        return self.replica.stop_grace_s()

    def health(self) -> dict[str, Any]:
        return {**self.replica.health(), "usage": self.usage.health(),
                "calibration": self.settings.calibration.describe()}

    def rerank_fn(self, timeout_s: float) -> RerankFn | None:
        """The reranker as the descent wants it: scores, or None on any failure (counted upstream)."""
        if self.reranker is None:
            return None
        reranker = self.reranker

        async def call(query: str, docs: list[str]) -> list[float] | None:
            try:
                return await asyncio.wait_for(reranker.rerank(query, docs), timeout_s)
            except Exception as e:  # noqa: BLE001 - any failure falls back to vector scores
                log.warning("rerank failed, falling back to vector scores: %s", e)
                return None

        return call

    @handles(catalog.SEARCH_FIND)
    async def find(self, req: search_msgs.FindRequest, ctx: Ctx) -> search_msgs.FindResult:
        """`search.find`: Semantic find: one vector search, ranked hits."""
        targets = self.spans(req, ctx)
        if targets is None:
            return await self._find_here(req, ctx)
        # Once, for every shard (the common names judged by this shard's rows of the account).
        vec = (await query_vectors(self.embedder, self.index, [req.query], [Query(account=ctx.identity.account)]))[0] \
            if req.query.strip() else None
        body = search_msgs.ShardFindRequest(find=req, vector=b"" if vec is None else wire_vector(vec),
                                            model=self.embedder.name)
        parts, missing = await self.scatter.ask(targets, catalog.SEARCH_FIND_SHARD, body, ctx,
                                                search_msgs.FindResult, lambda: self._find_here(req, ctx, vec))
        return merge_find(parts, params.common(req, self.clock(), check_tags).limit, missing)

    @handles(catalog.SEARCH_FIND_SHARD)
    async def find_shard(self, req: search_msgs.ShardFindRequest, ctx: Ctx) -> search_msgs.FindResult:
        """`search.find_shard`: find from this shard's rows, with the asking retriever's query vector."""
        return await self._find_here(req.find, ctx, sent_vector(req.vector, req.model, self.embedder))

    async def _find_here(self, req: search_msgs.FindRequest, ctx: Ctx,
                         given: np.ndarray | None = None) -> search_msgs.FindResult:
        t0 = time.perf_counter()
        c = params.common(req, self.clock(), check_tags)
        prefixes = scope.targets(self.ns, req.target_uri, c.context_types, ctx.identity)
        q = Query(account=ctx.identity.account, prefixes=prefixes, levels=c.levels, context_types=c.context_types,
                  since=c.since, until=c.until, time_field=req.time_field, predicate=c.predicate)
        fresh = await self.replica.catch_up(ctx)
        prov: dict[str, Any] = {"mode": "quick", "targets": prefixes, "fresh": fresh}
        if not req.query.strip():
            rows = self.index.scan(q, c.limit)
            result = results.group((results.to_matched(r, 0.0, self.index.abstract_of(r)) for r in rows), c.limit)
            prov["engine"] = "scan"
        else:
            k = c.limit * (params.EVENT_DECAY_OVERFETCH if c.decay is not None else 1)
            te = time.perf_counter()
            # The keyword half needs no vector: it runs while the query's embedding is on its way.
            if given is None:
                vecs, words = await overlapped(query_vectors(self.embedder, self.index, [req.query], [q]),
                                               lambda: keyword_hits(self.index, req.query, q, k + 2))
                vec = vecs[0]
            else:
                vec, words = given, keyword_hits(self.index, req.query, q, k + 2)
            prov["embed_ms"] = round((time.perf_counter() - te) * 1000, 3)
            ts = time.perf_counter()
            # Dense and keyword candidates on the cosine scale: error codes and rare names the
            # embedder blurs still rank (the flat search of docs/design/retrieval.md, with BM25 beside it).
            hits = hybrid(self.index, vec, req.query, q, k + 2, words=words)
            prov.update(engine="hybrid", search_ms=round((time.perf_counter() - ts) * 1000, 3))
            cal = self.settings.calibration

            def passes(h: Hit, margin: float) -> bool:
                return results.passes(decayed_score(h.row, cal.score(gate_of(h) - margin), c.decay, c.now),
                                      req.score_threshold)

            matched = [decayed_match(h.row, cal.score(h.score), c.decay, c.now, self.index.abstract_of(h.row))
                       for h in answered(hits, passes)]
            prov["calibration"] = cal.describe()
            result = results.group(matched, c.limit, ranked_input=True)
        account = ctx.identity.account
        index = self.index
        results.explain(result, req.query, "semantic", lambda q, rows: index.words_in(q, account, rows),
                        lambda uri: results.l1_overview(index.get(account, uri, 1)))
        results.count_uses(result, self.usage, account)
        if req.read_content:
            await inline_content(self.ns, result, ctx.identity)
        if req.include_provenance:
            result.provenance = prov
        latency = (time.perf_counter() - t0) * 1000
        scores = [m.score for m in (*result.memories, *result.resources, *result.skills)]
        self.stats.record(",".join(sorted(c.context_types)) if c.context_types else "all", scores, latency,
                          path="find")
        if req.telemetry:
            result.telemetry = {"latency_ms": round(latency, 3), **{k: v for k, v in prov.items() if k.endswith("_ms")}}
        return result

    @handles(catalog.SEARCH_SEARCH, timeout_s=120.0)
    async def search(self, req: search_msgs.SearchRequest, ctx: Ctx) -> Any:
        """`search.search`: Search: a ranked list, or an assembled context block."""
        if req.mode == "list":
            given = search_msgs.context_fields_given(req)
            if given:
                raise InvalidArgument(f"{', '.join(given)} only apply to mode=\"context\"",
                                      {"field": given[0], "fields": given})
            targets = self.spans(req, ctx)
            if targets is None:
                return await run_search(self.lists, req, ctx)
            planned = await plan_search(self.lists, req, ctx, embed=True)  # once, for every shard
            body = shard_request(req, planned, self.embedder.name)
            parts, missing = await self.scatter.ask(targets, catalog.SEARCH_SEARCH_SHARD, body, ctx,
                                                    search_msgs.FindResult,
                                                    lambda: run_search(self.lists, req, ctx, planned))
            return merge_find(parts, params.common(req, self.clock(), check_tags).limit, missing)
        # context / bootstrap: the assembler serves it (one subject, two actors; docs/design/context-assembly.md).
        return await self.bus.call(catalog.ASSEMBLE_CONTEXT, req, ctx.identity, ctx.remaining(),
                                   index_seq=ctx.index_seq, into=msgspec.Raw)  # passed on as it came

    @handles(catalog.SEARCH_SEARCH_SHARD, timeout_s=120.0)
    async def search_shard(self, req: search_msgs.ShardSearchRequest, ctx: Ctx) -> search_msgs.FindResult:
        """`search.search_shard`: a list search from this shard's rows, with the asking retriever's
        plan and query vectors."""
        return await run_search(self.lists, req.search, ctx, planned_from(req, self.embedder))

    @handles(catalog.SEARCH_CANDIDATES, fresh_result=True)
    async def candidates(self, req: context_msgs.CandidatesRequest, ctx: Ctx) -> context_msgs.CandidatesResult:
        """Every bucket for every query in one trip; request errors raise, retrieval errors are
        reported per bucket (docs/design/context-assembly.md, finding 12). A sharded index: every
        shard is asked (buckets span the spaces), a silent one reported as `shard:<k>`."""
        if self.scatter.shards > 1 and not ctx.forwarded:
            every = list(range(self.scatter.shards))
            vecs = await query_vectors(self.embedder, self.index, req.queries,  # once, for all
                                       [Query(account=ctx.identity.account)])
            req = msgspec.structs.replace(req, vectors=[wire_vector(v) for v in vecs],
                                          vector_model=self.embedder.name)
            parts, missing = await self.scatter.ask(every, catalog.SEARCH_CANDIDATES, req, ctx,
                                                    context_msgs.CandidatesResult,
                                                    lambda: self._candidates_here(req, ctx))
            return merge_candidates(parts, req, missing)
        return await self._candidates_here(req, ctx)

    async def _candidates_here(self, req: context_msgs.CandidatesRequest, ctx: Ctx) -> context_msgs.CandidatesResult:
        t0 = time.perf_counter()
        probe = search_msgs.FindRequest(query=req.queries[0], context_type=req.context_type, tags=req.tags,
                                        filter=req.filter, since=req.since, until=req.until,
                                        time_field=req.time_field,
                                        events_time_decay_protection=req.events_time_decay_protection)
        c = params.common(probe, self.clock(), check_tags)
        unknown = [b.name for b in req.buckets if b.name not in candidates.BUCKETS]
        if unknown:
            raise InvalidArgument(f"unknown bucket {unknown[0]!r}",
                                  {"field": "buckets", "known": list(candidates.BUCKETS)})
        await self.replica.catch_up(ctx)
        out = await gather(self.index, self.embedder, self.settings.calibration, req, c, ctx.identity)
        scores = sorted({c.uri: c.score for cs in out.buckets.values() for c in cs}.values(), reverse=True)
        self.stats.record(",".join(b.name for b in req.buckets), scores, (time.perf_counter() - t0) * 1000,
                          path="context")
        return out

    @handles(catalog.SYSTEM_STATS)
    async def system_stats(self, req: Empty, ctx: Ctx) -> StatsResult:
        """`system.stats`: Retrieval counters and queue depths."""
        queues = await self.bus.info()
        return StatsResult(retrieval=self.stats.snapshot(), index=self.health(), queues=queues)
