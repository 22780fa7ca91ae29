"""system.health, system.stats and system.whoami."""

from __future__ import annotations

from typing import Any

import msgspec


class Empty(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """A request without fields."""


class WorkerInfo(msgspec.Struct, kw_only=True):
    """One worker: its id, host, actors and load."""

    worker_id: str
    actors: list[str]
    in_flight: int
    handled: int
    started_at: float


class HealthResult(msgspec.Struct, kw_only=True):
    """The reply of `system.health`."""

    status: str
    version: str
    actors: dict[str, Any]
    worker: WorkerInfo | None = None
    journal: dict[str, Any] = {}  # the write journal's outbox: events parked (JetStream refused) and drained


class WhoAmIResult(msgspec.Struct, kw_only=True):
    """The identity a request runs as (after key pinning), and where its account's events are:
    `<prefix>.evt.acct.<account_token>.>` and `<prefix>.note.acct.<account_token>.>`."""

    account: str
    user: str
    agent: str
    peer: str | None = None
    role: str
    account_token: str


class RetrievalStats(msgspec.Struct, kw_only=True):
    """Seed 002's retrieval counters, cumulative since the worker started."""

    total_queries: int = 0
    zero_result_queries: int = 0
    zero_result_rate: float = 0.0
    avg_results_per_query: float = 0.0
    avg_score: float = 0.0
    max_score: float = 0.0
    min_score: float = 0.0
    rerank_used: int = 0
    rerank_fallback: int = 0
    avg_latency_ms: float = 0.0
    max_latency_ms: float = 0.0
    by_context_type: dict[str, int] = {}
    by_path: dict[str, int] = {}  # find, search, context (context mode and recall candidates)
    # Per score signal (calibrated similarity, bm25, rrf): count, avg, min, max. The top-level
    # avg/min/max are the calibrated similarities only, never averaged with BM25 or RRF scores.
    by_signal: dict[str, dict[str, float]] = {}


class StatsResult(msgspec.Struct, kw_only=True):
    """The reply of `system.stats`."""

    retrieval: RetrievalStats
    index: dict[str, Any]
    queues: dict[str, Any] = {}
    worker: WorkerInfo | None = None
