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
from skald.actors.kit.ports import LLM, Calls, Embedder, IndexLog, Reranker, UsageLog
from skald.actors.kit.request import Ctx
from skald.actors.retriever import candidates, params, querybank, results, scope
from skald.actors.retriever.list_search import ListSearch, RerankFn, SearchSettings, run_search
from skald.actors.retriever.reads import TreeReads, inline_content
from skald.actors.retriever.replica import IndexReplica
from skald.actors.retriever.scoring import (
    Words,
    answered,
    decayed_match,
    decayed_score,
    gate_of,
    hybrid,
    keyword_hits,
)
from skald.actors.retriever.stats import StatsCollector
from skald.actors.retriever.usage import UsageCounts
from skald.actors.text import sections
from skald.actors.text.tags import check_tags
from skald.messages import catalog
from skald.messages import context as context_msgs
from skald.messages import search as search_msgs
from skald.messages.errors import InvalidArgument
from skald.messages.system import Empty, StatsResult
from skald.store.index import Hit, Query, VectorIndex
from skald.store.uri import Namespace, join_uri

log = logging.getLogger("skald.retriever")


class RetrieverBus(Calls, IndexLog, UsageLog, Protocol):
    """The bus ports the retriever uses: its index replica follows the log, the use counters feed hotness."""


class Retriever(TreeReads):
    def __init__(self, ns: Namespace, embedder: Embedder, bus: RetrieverBus, state_dir: Path, llm: LLM,
                 reranker: Reranker | None = None, settings: SearchSettings | None = None,
                 clock: Callable[[], float] = time.time, snapshot_interval_s: float = 30.0) -> None:
        self.ns = ns
        self.embedder = embedder
        self.llm = llm
        self.reranker = reranker
        self.settings = settings or SearchSettings()
        self.bus = bus
        self.clock = clock
        self.replica = IndexReplica(embedder.name, embedder.dim, bus, state_dir, snapshot_interval_s)
        self.usage = UsageCounts(bus)
        self.stats = StatsCollector()
        self.lists = ListSearch(ns=ns, replica=self.replica, embedder=embedder, llm=llm, settings=self.settings,
                                stats=self.stats, clock=clock, rerank=self.rerank_fn, usage=self.usage)

    @property
    def index(self) -> VectorIndex:
        return self.replica.index

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
        t0 = time.perf_counter()
        c = params.common(req, self.clock(), check_tags)
        prefixes = scope.targets(self.ns, req.target_uri, c.context_types, ctx.identity)
        q = Query(account=ctx.identity.account, prefixes=prefixes, levels=c.levels, context_types=c.context_types,
                  since=c.since, until=c.until, time_field=req.time_field, predicate=c.predicate)
        fresh = await self.replica.catch_up(ctx)
        prov: dict[str, Any] = {"mode": "quick", "targets": prefixes, "fresh": fresh}
        if not req.query.strip():
            rows = self.index.scan(q, c.limit)
            result = results.group((results.to_matched(r, 0.0) for r in rows), c.limit)
            prov["engine"] = "scan"
        else:
            k = c.limit * (params.EVENT_DECAY_OVERFETCH if c.decay is not None else 1)
            te = time.perf_counter()
            # The keyword half needs no vector: it runs while the query's embedding is on its way.
            vec, words = await overlapped(self.embedder.embed_query(req.query),
                                          lambda: keyword_hits(self.index, req.query, q, k + 2))
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

            matched = [decayed_match(h.row, cal.score(h.score), c.decay, c.now) for h in answered(hits, passes)]
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
        if req.mode == "list":
            given = search_msgs.context_fields_given(req)
            if given:
                raise InvalidArgument(f"{', '.join(given)} only apply to mode=\"context\"",
                                      {"field": given[0], "fields": given})
            return await run_search(self.lists, req, ctx)
        # context / bootstrap: the assembler serves it (one subject, two actors; docs/design/context-assembly.md).
        return await self.bus.call(catalog.ASSEMBLE_CONTEXT, req, ctx.identity, ctx.remaining(),
                                   index_seq=ctx.index_seq, into=msgspec.Raw)  # passed on as it came

    @handles(catalog.SEARCH_CANDIDATES, fresh_result=True)
    async def candidates(self, req: context_msgs.CandidatesRequest, ctx: Ctx) -> context_msgs.CandidatesResult:
        """Every bucket for every query in one trip; request errors raise, retrieval errors are
        reported per bucket (docs/design/context-assembly.md, finding 12)."""
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
        excluded = candidates.excluder(req.exclude_uris, req.exclude_uris)
        cooled = candidates.excluder(req.cooled_uris, req.cooled_prefixes)
        account = ctx.identity.account
        index = self.index
        cal = self.settings.calibration

        def package_abstract(pkg: tuple[str, ...]) -> str:
            row = index.get(account, join_uri(pkg), 0)
            return row.abstract if row else ""

        out = context_msgs.CandidatesResult(buckets={})
        plans: dict[str, tuple[Query, int, int] | None] = {}
        for b in req.buckets:
            prefixes, ctypes, category = candidates.bucket_scope(b.name, ctx.identity, req.peer_scope)
            if c.context_types is not None:
                ctypes = ctypes & c.context_types
            if not ctypes:
                plans[b.name] = None
                continue
            base = c.predicate
            pred = base if category is None else (
                (lambda r, cat=category: r.category == cat) if base is None else
                (lambda r, cat=category, p=base: r.category == cat and p(r)))
            # Room for what shaping removes before the cut: collapsed skill files, directory
            # levels, scope directories, exclusions and cooled URIs. The turns of one transcript
            # count as one entry: when the first page holds turns, the index is asked again for
            # up to TURNS_PER_ENTRY per entry (`k_turns`).
            room = max(10, b.limit // 2) + len(req.exclude_uris) + len(req.cooled_uris)
            over = params.EVENT_DECAY_OVERFETCH if c.decay is not None else 1
            plans[b.name] = (Query(account=account, prefixes=prefixes, context_types=ctypes, since=c.since,
                                   until=c.until, time_field=req.time_field, predicate=pred),
                             (b.limit + room) * over, (b.limit * candidates.TURNS_PER_ENTRY + room) * over)
        errors: dict[str, str] = {}

        def keyword_half() -> dict[str, list[Words]]:
            """Every bucket's keyword hits for every query, while the embeddings are on their way."""
            got: dict[str, list[Words]] = {}
            for name, plan in plans.items():
                if plan is None:
                    continue
                try:
                    got[name] = [keyword_hits(index, text, plan[0], plan[1]) for text in req.queries]
                except Exception as e:  # noqa: BLE001 - one bucket's failure is reported, the others answer
                    log.exception("candidates: bucket %s failed", name)
                    errors[name] = f"{type(e).__name__}: {e}"[:300]
            return got

        te = time.perf_counter()
        vecs, words = await overlapped(asyncio.gather(*(self.embedder.embed_query(q) for q in req.queries)),
                                       keyword_half)
        embed_ms = (time.perf_counter() - te) * 1000
        n_excluded: set[str] = set()
        n_cooled: set[str] = set()
        search_s = shape_s = 0.0
        # Per hit below: looked up once (an event-free request skips the decay altogether).
        to_scale, decay, now, thr, gte = cal.score, c.decay, c.now, req.score_threshold, req.score_gte
        for b in req.buckets:
            plan = plans[b.name]
            if plan is None or b.name in errors:
                out.buckets[b.name] = []
                continue
            q, k, k_turns = plan

            def passes(h: Hit, margin: float) -> bool:
                s = to_scale((h.score if h.gate is None else h.gate) - margin)
                return results.passes(s if decay is None else decayed_score(h.row, s, decay, now), thr, gte)

            def ranked(k: int, kws: list[Words], q: Query = q) -> tuple[list[Hit], bool]:
                """Every query's passing hits, and whether a full page held transcript turns."""
                out: list[Hit] = []
                more = False
                for text, vec, kw in zip(req.queries, vecs, kws, strict=True):
                    found = hybrid(index, vec, text, q, k, keywords_only=req.keywords_only, words=kw)
                    more |= len(found) >= k and any(sections.is_turn(h.row.uri) for h in found)
                    out += answered(found, passes)
                return out, more

            try:
                ts = time.perf_counter()
                hits, more = ranked(k, words[b.name])
                if more and k_turns > k:  # turns group into entries: a page of k rows is fewer entries
                    hits, _ = ranked(k_turns, [keyword_hits(index, text, q, k_turns) for text in req.queries])
                tm = time.perf_counter()
                search_s += tm - ts
                scored = ([candidates.Scored(h.row, to_scale(h.score), h.score) for h in hits] if decay is None else
                          [candidates.Scored(h.row, decayed_score(h.row, to_scale(h.score), decay, now),
                                             decayed_score(h.row, h.score, decay, now)) for h in hits])
                shaped = candidates.shape(scored, ctx.identity, excluded, cooled, package_abstract,
                                          req.other_peer_penalty)
                n_excluded |= shaped.excluded
                n_cooled |= shaped.cooled
                out.buckets[b.name] = candidates.cut([m for m in shaped.candidates if results.passes(
                    m.score, req.score_threshold, req.score_gte)], b.limit)
                shape_s += time.perf_counter() - tm
            except Exception as e:  # noqa: BLE001 - one bucket's failure is reported, the others answer
                log.exception("candidates: bucket %s failed", b.name)
                out.buckets[b.name] = []
                errors[b.name] = f"{type(e).__name__}: {e}"[:300]
        out.errors.update(errors)
        out.excluded, out.cooled, out.embed_ms = len(n_excluded), len(n_cooled), round(embed_ms, 3)
        out.search_ms, out.shape_ms = round(search_s * 1000, 3), round(shape_s * 1000, 3)
        scores = sorted({c.uri: c.score for cs in out.buckets.values() for c in cs}.values(), reverse=True)
        self.stats.record(",".join(b.name for b in req.buckets), scores, (time.perf_counter() - t0) * 1000,
                          path="context")
        return out

    @handles(catalog.SYSTEM_STATS)
    async def system_stats(self, req: Empty, ctx: Ctx) -> StatsResult:
        queues = await self.bus.info()
        return StatsResult(retrieval=self.stats.snapshot(), index=self.health(), queues=queues)
