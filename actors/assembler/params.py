"""From a `search(mode="context")` or `recall` request to one resolved parameter set.

`recall` is a preset, not a second implementation (docs/design/context-assembly.md): it has no parameter of its
own and no branch of its own; it only supplies other defaults and folds the deprecated v1
names. Both entry points call `resolve()` and then the same pipeline, so equal explicit
parameters give byte-identical replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET

from skald.messages.errors import InvalidArgument
from skald.messages.search import QUOTA_KEYS, RecallRequest, SearchRequest

TIERS = ("abstract", "overview", "full")  # requestable; "uri" is only ever a fallback
CATEGORIES = ("events", "entities", "preferences", "experiences", "memories", "resources", "skills")
V1_BUCKETS = ("events", "entities", "preferences", "experiences")
V1_QUOTAS = {"events": 10, "entities": 10, "preferences": 3, "experiences": 0}

PURPOSES: dict[str, dict[str, int]] = {
    "chat": {"events": 3, "entities": 3, "preferences": 1, "experiences": 1, "resources": 1, "skills": 1},
    "coding": {"events": 1, "entities": 2, "preferences": 1, "experiences": 1, "resources": 3, "skills": 2},
}
# Share of score an other peer's memory loses: preferences transfer least between peers,
# shared resources and skills not at all. A number applies to every category.
OTHER_PEER_PENALTY = {"events": 0.2, "entities": 0.1, "preferences": 0.3, "experiences": 0.1, "memories": 0.2,
                      "resources": 0.0, "skills": 0.0}


@dataclass(frozen=True, slots=True)
class Preset:
    """The defaults a context preset (search context, recall) supplies."""

    purpose: str | None
    dedup_turns: int  # applies only with a session
    score_threshold: float
    max_tokens: int


SEARCH = Preset(purpose=None, dedup_turns=0, score_threshold=0.1, max_tokens=1600)
RECALL = Preset(purpose="coding", dedup_turns=5, score_threshold=0.35, max_tokens=1600)


@dataclass(slots=True)
class Params:
    """The knobs of one descent: limit, threshold, propagation and hotness weights, fan-out and convergence."""

    mode: str  # context | bootstrap
    query: str
    session_id: str | None
    query_expansion: str
    limit: int
    score_threshold: float
    score_gte: bool
    quotas: dict[str, int] | None  # None: quota-free, one search, `limit` applies
    detail: dict[str, str]  # category -> pinned tier; missing: the category's default
    detail_echo: Any  # what stats.detail reports
    max_tokens: int
    dedup_turns: int
    exclude_uris: list[str]
    peer_scope: str
    other_peer_penalty: dict[str, float]
    rewrite: bool | str
    rewrite_max_bullets: int
    filters: dict[str, Any]
    ignored: list[str] = field(default_factory=list)
    deprecated: list[str] = field(default_factory=list)


def _given(v: Any) -> bool:
    return v is not UNSET


def _detail(raw: Any, ignored: list[str]) -> tuple[dict[str, str], Any]:
    """A scalar pins every category, a map pins the ones it names; "auto" is unset, and an
    unknown tier (e.g. v1's "summary") degrades to the default rather than failing."""
    if raw is UNSET or raw is None or raw == "auto":
        return {}, None
    if isinstance(raw, str):
        if raw in TIERS:
            return dict.fromkeys(CATEGORIES, raw), raw
        ignored.append("detail")
        return {}, None
    out: dict[str, str] = {}
    for cat, tier in raw.items():
        if cat in CATEGORIES and tier in TIERS:
            out[cat] = tier
        elif tier != "auto":
            ignored.append(f"detail.{cat}")
    return out, out or None


def _penalty(raw: Any) -> dict[str, float]:
    if raw is UNSET:
        return dict(OTHER_PEER_PENALTY)
    if isinstance(raw, (int, float)):
        return dict.fromkeys(CATEGORIES, float(raw))
    unknown = [k for k in raw if k not in CATEGORIES]
    if unknown:
        raise InvalidArgument(f"other_peer_penalty: unknown category {unknown[0]!r}",
                              {"field": "other_peer_penalty", "known": list(CATEGORIES)})
    return {**OTHER_PEER_PENALTY, **{k: float(v) for k, v in raw.items()}}


def resolve(req: SearchRequest, preset: Preset) -> Params:
    """Validate a context request and fill in the preset's defaults. Raises INVALID_ARGUMENT."""
    ignored: list[str] = []
    deprecated: list[str] = []
    max_tokens = req.max_tokens
    threshold = req.score_threshold
    detail_raw: Any = req.detail
    quotas = req.quotas
    if isinstance(req, RecallRequest):
        if req.mode == "bootstrap":
            raise InvalidArgument("recall is the context preset; use search for mode=\"bootstrap\"", {"field": "mode"})
        if _given(req.max_chars):
            deprecated.append("max_chars")
            if not _given(max_tokens):
                max_tokens = min(32_000, max(64, round(req.max_chars / 4)))
        if _given(req.min_score):
            deprecated.append("min_score")
            if threshold is None:
                threshold = float(req.min_score)
        if _given(req.render):
            deprecated.append("render")
            if not _given(detail_raw):
                detail_raw = "full" if req.render in (True, "full") else "abstract"
        if isinstance(quotas, dict) and all(k in V1_BUCKETS for k in quotas):
            # v1 merged the caller's quotas over its bucket defaults (docs/design/context-assembly.md, finding 8).
            deprecated.append("quotas(v1)")
            quotas = {**V1_QUOTAS, **quotas}
    elif req.mode == "list":
        raise InvalidArgument("not a context request", {"field": "mode"})
    if req.target_uri:
        raise InvalidArgument("target_uri is not supported with mode=\"context\" (buckets and target cannot be "
                              "intersected yet)", {"field": "target_uri"})
    if req.read_content:
        raise InvalidArgument("read_content is not supported with mode=\"context\": assembly has its own "
                              "token budget", {"field": "read_content"})
    mode = "bootstrap" if req.mode == "bootstrap" else "context"
    if mode == "context" and not req.query.strip():
        raise InvalidArgument("query must not be empty in context mode: mode='bootstrap' builds a block without "
                              "one, and find or search with no query list the rows the filters select",
                              {"field": "query"})
    if isinstance(quotas, dict):
        unknown = [k for k in quotas if k not in QUOTA_KEYS]
        if unknown:
            raise InvalidArgument(f"unknown quota key {unknown[0]!r}", {"field": "quotas", "known": list(QUOTA_KEYS)})
    purpose = req.purpose if _given(req.purpose) else preset.purpose
    if isinstance(quotas, dict):
        if _given(req.purpose) and req.purpose is not None:
            ignored.append("purpose")
        bucket_quotas: dict[str, int] | None = {k: quotas.get(k, 0) for k in QUOTA_KEYS}
    elif purpose is not None:
        bucket_quotas = dict(PURPOSES[purpose])
    else:
        bucket_quotas = None
    if bucket_quotas is not None and (req.limit != 10 or req.node_limit is not None):
        ignored.append("limit")
    if req.level is not None:
        ignored.append("level")
    # Candidates are dense + keyword by default (what "semantic" and "hybrid" both get here);
    # "keywords" keeps only what BM25 found.
    if req.include_provenance:
        ignored.append("include_provenance")
    dedup = req.dedup_turns if _given(req.dedup_turns) else preset.dedup_turns
    if dedup and not req.session_id:
        if _given(req.dedup_turns):
            ignored.append("dedup_turns")
        dedup = 0
    detail, echo = _detail(detail_raw, ignored)
    return Params(
        mode=mode, query=req.query.strip(), session_id=req.session_id,
        query_expansion=req.query_expansion if _given(req.query_expansion) else "auto",
        limit=req.node_limit or req.limit,
        score_threshold=threshold if threshold is not None else preset.score_threshold, score_gte=req.score_gte,
        quotas=bucket_quotas, detail=detail, detail_echo=echo,
        max_tokens=max_tokens if _given(max_tokens) else preset.max_tokens, dedup_turns=dedup,
        exclude_uris=list(req.exclude_uris) if _given(req.exclude_uris) else [],
        peer_scope=req.peer_scope if _given(req.peer_scope) else "all",
        other_peer_penalty=_penalty(req.other_peer_penalty),
        rewrite=req.rewrite if _given(req.rewrite) else False,
        rewrite_max_bullets=req.rewrite_max_bullets if _given(req.rewrite_max_bullets) else 6,
        filters={"context_type": req.context_type, "tags": req.tags, "filter": req.filter, "since": req.since,
                 "until": req.until, "time_field": req.time_field,
                 "events_time_decay_protection": req.events_time_decay_protection,
                 "keywords_only": req.search_type == "keywords"},
        ignored=ignored, deprecated=deprecated)
