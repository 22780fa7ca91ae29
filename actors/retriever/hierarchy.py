"""Directory-recursive retrieval (docs/design/retrieval.md), as a pure core over an index interface.

THINKING: a global search over directories (levels 0 and 1) finds where to start; the default
roots join at score 0 so an empty global hit list still descends; a max-heap expands the best
directories first, up to four per round, scoring their children (rerank when configured),
propagating the parent's score, keeping what passes the threshold and pushing non-leaf
children back; it stops when the top-k has not changed for three rounds or the pool has not
grown for three rounds. QUICK is the flat search `find` uses.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from skald.messages.index import IndexRow
from skald.store.index import Hit, Query

GLOBAL_SEARCH_TOPK = 10  # more starting candidates make the later rerank more precise
MAX_PARALLEL_CHILD_SEARCHES = 4  # bounds the fan-out of one round
MAX_CONVERGENCE_ROUNDS = 3
HOTNESS_HALF_LIFE_DAYS = 7.0
TRACE_REJECTED = 5  # rejected children listed per directory in a trajectory

Rerank = Callable[[str, list[str]], Awaitable[list[float] | None]]


class TreeIndex(Protocol):
    """What the descent needs of the index: a global search, children of many parents, and a row filter."""

    def search(self, vec: np.ndarray, q: Query, k: int) -> tuple[list[Hit], Any]: ...

    def search_children_many(self, vec: np.ndarray, account: str, parents: list[str], q: Query,
                             k: int, collect: Query | None = None) -> list[list[Hit]]: ...

    def allows(self, row: IndexRow, q: Query, scoped: bool = False) -> bool: ...

    def abstract_of(self, row: IndexRow) -> str: ...


def hotness(active_count: int, updated_at: float | None, now: float) -> float:
    """`(1+n)/(2+n) * 2^(-age_days/7)`: use raises it toward 1, age halves it weekly; no time = 0."""
    if not updated_at:
        return 0.0
    age_days = max(0.0, now - updated_at) / 86400.0
    n = max(0, active_count)
    return (1 + n) / (2 + n) * math.exp(-math.log(2) * age_days / HOTNESS_HALF_LIFE_DAYS)


def propagate(child: float, parent: float, alpha: float) -> float:
    """`alpha * child + (1 - alpha) * parent`, or the child's own score under a zero-score parent."""
    return alpha * child + (1 - alpha) * parent if parent else child


def passes(score: float, threshold: float, gte: bool) -> bool:
    return score >= threshold if gte else score > threshold


@dataclass(slots=True)
class Params:
    """The knobs of one descent: limit, threshold, propagation and hotness weights, fan-out and convergence."""

    limit: int = 10
    threshold: float | None = None
    score_gte: bool = False
    alpha: float = 1.0  # score_propagation_alpha
    hotness_alpha: float = 0.0
    now: float = 0.0
    trace: bool = True  # record the trajectory (directories entered, rejections); off saves time
    uses: Callable[[IndexRow], int] | None = None  # a row's use count (active_count); None: the row's own


@dataclass(slots=True)
class Outcome:
    """What a descent found, with its trajectory and whether rerank was used or fell back."""

    hits: list[tuple[IndexRow, float]]
    trace: dict[str, Any] = field(default_factory=dict)
    rerank_used: bool = False
    rerank_fallback: bool = False


async def _scores(rerank: Rerank | None, query: str, hits: list[Hit], out: Outcome,
                  abstract_of: Callable[[IndexRow], str]) -> list[float]:
    base = [h.score for h in hits]
    if rerank is None or not hits:
        return base
    got = await rerank(query, [abstract_of(h.row) or h.row.uri for h in hits])
    out.rerank_used = True
    if got is None or len(got) != len(hits) or not all(math.isfinite(s) for s in got):
        out.rerank_fallback = True
        return base
    return list(got)


async def descend(index: TreeIndex, vec: np.ndarray, text: str, scope: Query, collect: Query,
                   roots: list[str], p: Params, rerank: Rerank | None = None) -> Outcome:
    """Descend from the best directories; `scope` bounds where to look, `collect` what to keep."""
    out = Outcome(hits=[])
    threshold = p.threshold if p.threshold is not None else 0.0
    gq = Query(account=scope.account, prefixes=scope.prefixes, levels=frozenset({0, 1}),
               context_types=scope.context_types)
    global_hits, _ = index.search(vec, gq, max(p.limit, GLOBAL_SEARCH_TOPK))
    dir_scores = await _scores(rerank, text, global_hits, out, index.abstract_of)
    starts: list[tuple[str, float]] = []
    seen: set[str] = set()
    for h, s in zip(global_hits, dir_scores, strict=True):
        if h.row.uri not in seen:
            seen.add(h.row.uri)
            starts.append((h.row.uri, s))
    for uri in roots:
        if uri not in seen:
            seen.add(uri)
            starts.append((uri, 0.0))
    trace: dict[str, Any] = {"starting_points": [{"uri": u, "score": round(s, 6)} for u, s in starts], "rounds": []}
    heap = [(-s, u) for u, s in starts]
    heapq.heapify(heap)
    visited: set[str] = set()
    pool: dict[tuple[str, int], tuple[IndexRow, float]] = {}
    child_k = max(p.limit * 2, 20)
    prev_topk: list[tuple[str, int]] = []
    last_topk: list[tuple[str, int]] = []  # this round's top-k, whatever the convergence bookkeeping did
    prev_size = 0
    converge = stagnant = 0
    reason = "queue_empty"
    child_scope = Query(account=scope.account, prefixes=scope.prefixes)
    while heap:
        batch: list[tuple[str, float]] = []
        while heap and len(batch) < MAX_PARALLEL_CHILD_SEARCHES:
            neg, uri = heapq.heappop(heap)
            if uri in visited:
                continue
            visited.add(uri)
            batch.append((uri, -neg))
        if not batch:
            break
        results = index.search_children_many(vec, scope.account, [u for u, _ in batch], child_scope, child_k,
                                             collect)
        if rerank is None:
            scored: list[list[float]] = [[h.score for h in hits] for hits in results]
        else:
            scored = list(await asyncio.gather(*(_scores(rerank, text, hits, out, index.abstract_of)
                                                 for hits in results)))
        rnd: list[dict[str, Any]] = []
        changed: set[tuple[str, int]] = set()
        gte, alpha, tracing = p.score_gte, p.alpha, p.trace
        for (uri, parent), hits, scores in zip(batch, results, scored, strict=True):
            kept = pushed = 0
            rejected: list[dict[str, Any]] = []
            for h, s in zip(hits, scores, strict=True):
                final = alpha * s + (1 - alpha) * parent if parent else s
                if not (final >= threshold if gte else final > threshold):
                    if tracing and len(rejected) < TRACE_REJECTED:
                        rejected.append({"uri": h.row.uri, "level": h.row.level, "score": round(final, 6)})
                    continue
                row = h.row
                # Children of a directory inside the scope are inside it too; `keep` is the collect filter.
                if h.keep:
                    key = (row.uri, row.level)
                    cur = pool.get(key)
                    if cur is None or final > cur[1]:
                        pool[key] = (row, final)
                        changed.add(key)
                    kept += 1
                if row.level != 2 and row.uri not in visited:
                    heapq.heappush(heap, (-final, row.uri))
                    pushed += 1
            if tracing:
                rnd.append({"uri": uri, "score": round(parent, 6), "children": len(hits), "kept": kept,
                            "pushed": pushed, "rejected": rejected})
        trace["rounds"].append(rnd)
        # Scores only rise, so the new top-k lies within the old top-k and what changed this round.
        cands = set(last_topk) | changed
        topk = heapq.nlargest(p.limit, cands, key=lambda key: (pool[key][1], key))
        last_topk = topk
        if topk == prev_topk and len(topk) >= p.limit:
            converge += 1
            if converge >= MAX_CONVERGENCE_ROUNDS:
                reason = "topk_stable"
                break
        elif len(pool) == prev_size:
            stagnant += 1
            if stagnant >= MAX_CONVERGENCE_ROUNDS:
                reason = "stagnant"
                break
        else:
            converge = stagnant = 0
            prev_topk, prev_size = topk, len(pool)
    trace["convergence"] = reason
    trace["visited"] = len(visited)
    final_hits = list(pool.values())
    if p.hotness_alpha > 0:
        a = p.hotness_alpha
        uses = p.uses or (lambda r: r.active_count)
        final_hits = [(r, (1 - a) * s + a * hotness(uses(r), r.updated_at, p.now)) for r, s in final_hits]
    final_hits.sort(key=lambda rs: (-rs[1], rs[0].uri, rs[0].level))
    out.hits = final_hits
    out.trace = trace
    return out
