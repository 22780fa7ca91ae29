"""Scatter and gather over a sharded index: a search whose scope spans shards asks each shard's
retrievers with one deadline and merges their answers; a shard that does not answer is named in
the reply, never silently left out (docs/design/scale.md).

Shards answer on the same scale: every replica embeds with the same model and calibrates with
the same settings, so merging is by score. The merges are plain functions; `Scatter` does the I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
import numpy as np

from skald.actors.kit.ports import Embedder, ShardCalls
from skald.actors.kit.request import Ctx
from skald.actors.retriever import results
from skald.messages import errors
from skald.messages.catalog import Op
from skald.messages.context import Candidate, CandidatesRequest, CandidatesResult
from skald.messages.search import FindResult, ShardError

T = TypeVar("T")
MERGE_MARGIN_S = 0.05  # of the caller's deadline, kept for merging and replying after the shards


def wire_vector(vec: np.ndarray) -> bytes:
    """A query vector as a scatter sends it: little-endian float32."""
    return vec.astype("<f4").tobytes()


def sent_vector(data: bytes, model: str, embedder: Embedder) -> np.ndarray | None:
    """A vector the asking retriever embedded, if this one would have embedded the same (the same
    model and size); None: embed the query here."""
    if model != embedder.name or len(data) != 4 * embedder.dim:
        return None
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


def merge_find(parts: Sequence[FindResult], limit: int, missing: list[ShardError]) -> FindResult:
    """The best `limit` hits of every shard's answer, grouped as one search's would be. Calibrated
    scores clip at 1.0, so a query's strongest hits tie across shards: ties go by each hit's place
    in its shard's own ranked list (every shard's first, then every shard's second), not by URI,
    which put a shard's best hit below another's weaker ones in alphabetical order."""
    placed = [(i, m) for p in parts for kind in (p.memories, p.resources, p.skills) for i, m in enumerate(kind)]
    placed.sort(key=lambda x: (-x[1].score, x[0]))
    out = results.group([m for _, m in placed], limit, ranked_input=True)
    first = parts[0] if parts else None
    if first is not None:
        out.query_plan = first.query_plan
        if first.provenance is not None:
            out.provenance = {**first.provenance, "shards": len(parts) + len(missing)}
        if first.telemetry is not None:  # the slowest shard is what the caller waited for
            out.telemetry = {k: max(float((p.telemetry or {}).get(k, 0.0)) for p in parts)
                             for k in first.telemetry}
    out.missing_shards = missing
    return out


def _best(cs: list[Candidate], limit: int) -> list[Candidate]:
    best: dict[str, Candidate] = {}
    for c in cs:
        if c.uri not in best or (c.score, c.raw) > (best[c.uri].score, best[c.uri].raw):
            best[c.uri] = c
    return sorted(best.values(), key=lambda c: (-c.score, -c.raw, c.uri))[:limit]


def merge_candidates(parts: Sequence[CandidatesResult], req: CandidatesRequest,
                     missing: list[ShardError]) -> CandidatesResult:
    """Each bucket's best `limit` candidates over every shard, the counts added, the times the
    slowest shard's; a shard that did not answer is an error of its own (`shard:<k>`)."""
    buckets = {b.name: _best([c for p in parts for c in p.buckets.get(b.name, [])], b.limit) for b in req.buckets}
    errs = {k: v for p in parts for k, v in p.errors.items()}
    errs.update({f"shard:{m.shard}": f"{m.code}: {m.message}" for m in missing})
    return CandidatesResult(buckets=buckets, excluded=sum(p.excluded for p in parts),
                            cooled=sum(p.cooled for p in parts), errors=errs,
                            embed_ms=max((p.embed_ms for p in parts), default=0.0),
                            search_ms=max((p.search_ms for p in parts), default=0.0),
                            shape_ms=max((p.shape_ms for p in parts), default=0.0))


class Scatter:
    """Asks shards for one request: this worker's own shard in-process, the others over the bus."""

    def __init__(self, bus: ShardCalls, shards: int, mine: int) -> None:
        self.bus = bus
        self.shards = shards
        self.mine = mine

    async def ask(self, targets: list[int], op: Op, req: msgspec.Struct, ctx: Ctx, into: type[T],
                  local: Callable[[], Awaitable[T]]) -> tuple[list[T], list[ShardError]]:
        """Every target's answer, and the shards that failed. All failing is the first shard's error
        raised (as UNAVAILABLE when they differ): no partial answer made of nothing."""
        timeout = max(0.01, ctx.remaining() - MERGE_MARGIN_S)

        async def one(k: int) -> T:
            if k == self.mine:
                return await asyncio.wait_for(local(), timeout)
            got: T = await self.bus.call_shard(k, op, req, ctx.identity, timeout, index_seq=ctx.index_seq, into=into)
            return got

        got: list[Any] = await asyncio.gather(*(one(k) for k in targets), return_exceptions=True)
        answers: list[T] = []
        missing: list[ShardError] = []
        for k, g in zip(targets, got, strict=True):
            if isinstance(g, errors.SkaldError) and g.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL"):
                missing.append(ShardError(shard=k, code=g.code, message=g.message))
            elif isinstance(g, TimeoutError):
                missing.append(ShardError(shard=k, code="DEADLINE_EXCEEDED", message="no answer in time"))
            elif isinstance(g, BaseException):
                raise g  # the request itself is wrong (every shard would say so): the caller's error
            else:
                answers.append(g)
        if not answers:
            raise errors.Unavailable("no shard of the index the scope spans answered",
                                     {"shards": [msgspec.to_builtins(m) for m in missing], "retry_after_ms": 200})
        return answers, missing
