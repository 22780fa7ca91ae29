"""Seed 002's retrieval counters: cumulative, cheap to update, derived on read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from skald.messages.system import RetrievalStats


@dataclass(slots=True)
class StatsCollector:
    """Retrieval counters by path and signal for system.stats: queries, empty answers, result counts, score ranges."""

    queries: int = 0
    zero: int = 0
    results: int = 0
    score_sum: float = 0.0
    score_n: int = 0
    score_max: float = float("-inf")
    score_min: float = float("inf")
    rerank_used: int = 0
    rerank_fallback: int = 0
    latency_sum_ms: float = 0.0
    latency_max_ms: float = 0.0
    by_type: Counter[str] = field(default_factory=Counter)
    by_path: Counter[str] = field(default_factory=Counter)
    signals: dict[str, list[float]] = field(default_factory=dict)  # signal -> [n, sum, min, max]

    def record(self, context_type: str, scores: list[float], latency_ms: float, rerank_used: bool = False,
               rerank_fallback: bool = False, path: str = "find", signal: str = "similarity") -> None:
        """One query of `path` whose results scored `scores` on `signal`'s scale."""
        self.queries += 1
        self.by_type[context_type] += 1
        self.by_path[path] += 1
        self.results += len(scores)
        if not scores:
            self.zero += 1
        if scores:  # builtins over the list: a context request records a hundred scores
            n, total, lo, hi = len(scores), sum(scores), min(scores), max(scores)
            agg = self.signals.setdefault(signal, [0, 0.0, float("inf"), float("-inf")])
            agg[0] += n
            agg[1] += total
            agg[2] = min(agg[2], lo)
            agg[3] = max(agg[3], hi)
            if signal == "similarity":
                self.score_sum += total
                self.score_n += n
                self.score_max = max(self.score_max, hi)
                self.score_min = min(self.score_min, lo)
        self.rerank_used += int(rerank_used)
        self.rerank_fallback += int(rerank_fallback)
        self.latency_sum_ms += latency_ms
        self.latency_max_ms = max(self.latency_max_ms, latency_ms)

    def snapshot(self) -> RetrievalStats:
        q = max(self.queries, 1)
        return RetrievalStats(
            total_queries=self.queries, zero_result_queries=self.zero,
            zero_result_rate=round(self.zero / q, 4) if self.queries else 0.0,
            avg_results_per_query=round(self.results / q, 3) if self.queries else 0.0,
            avg_score=round(self.score_sum / self.score_n, 6) if self.score_n else 0.0,
            max_score=round(self.score_max, 6) if self.score_n else 0.0,
            min_score=round(self.score_min, 6) if self.score_n else 0.0,
            rerank_used=self.rerank_used, rerank_fallback=self.rerank_fallback,
            avg_latency_ms=round(self.latency_sum_ms / q, 3) if self.queries else 0.0,
            max_latency_ms=round(self.latency_max_ms, 3), by_context_type=dict(self.by_type),
            by_path=dict(self.by_path),
            by_signal={k: {"count": n, "avg": round(t / n, 6), "min": round(lo, 6), "max": round(hi, 6)}
                       for k, (n, t, lo, hi) in self.signals.items() if n},
        )
