"""find / search (list) / grep / glob, field for field as docs/design/retrieval-api.md documents them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

Uri = Annotated[str, Meta(min_length=1, max_length=4096)]
Limit = Annotated[int, Meta(ge=1, le=10_000)]
NodeLimit = Annotated[int, Meta(ge=1, le=100_000)]
ContextType = Literal["memory", "resource", "skill"]


class _Req(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class FindRequest(_Req, frozen=True):
    """The request of `search.find`: semantic find: one vector search, ranked hits."""

    query: Annotated[str, Meta(max_length=20_000)] = ""
    image_url: str | list[str] | None = None
    target_uri: str | list[str] = ""
    events_time_decay_protection: str | None = None
    context_type: ContextType | list[ContextType] | None = None
    tags: list[str] | None = None
    limit: Limit = 10
    node_limit: Limit | None = None
    score_threshold: float | None = None
    filter: dict[str, Any] | None = None
    since: str | None = None
    until: str | None = None
    time_field: Literal["updated_at", "created_at"] = "updated_at"
    level: int | str | list[int] | None = None
    include_provenance: bool = False
    read_content: bool = False
    telemetry: bool | dict[str, Any] = False


MAX_EXCLUDE_URIS = 200
QUOTA_KEYS = ("events", "entities", "preferences", "experiences", "resources", "skills")


class SearchRequest(FindRequest, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """docs/design/retrieval-api.md `search()`: find's parameters plus session-aware planning, the search type and,
    for `mode="context"` / `"bootstrap"` (served by the assembler), the L2 assembly and L3 rewrite
    parameters. Those default to UNSET so that a list-mode request carrying one is refused and a
    preset can tell "not given" from "given as the default"."""

    search_type: Literal["semantic", "keywords", "hybrid"] = "semantic"
    mode: Literal["list", "context", "bootstrap"] = "list"
    session_id: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    score_gte: bool = False
    # L1 (list and context)
    query_expansion: Literal["off", "auto"] | UnsetType = UNSET
    # L2 (context only)
    max_tokens: Annotated[int, Meta(ge=64, le=32_000)] | UnsetType = UNSET
    quotas: dict[str, Annotated[int, Meta(ge=0, le=1_000)]] | None | UnsetType = UNSET
    purpose: Literal["chat", "coding"] | None | UnsetType = UNSET
    detail: Annotated[str, Meta(max_length=32)] | dict[str, Annotated[str, Meta(max_length=32)]] | None | UnsetType \
        = UNSET
    dedup_turns: Annotated[int, Meta(ge=0, le=10_000)] | UnsetType = UNSET
    exclude_uris: Annotated[list[Annotated[str, Meta(min_length=1, max_length=4096)]],
                            Meta(max_length=MAX_EXCLUDE_URIS)] | UnsetType = UNSET
    peer_scope: Literal["actor", "all"] | UnsetType = UNSET
    other_peer_penalty: Annotated[float, Meta(ge=0.0, le=1.0)] | dict[str, Annotated[float, Meta(ge=0.0, le=1.0)]] \
        | UnsetType = UNSET
    # L3 (context only)
    rewrite: bool | Literal["auto"] | UnsetType = UNSET
    rewrite_max_bullets: Annotated[int, Meta(ge=1, le=20)] | UnsetType = UNSET


CONTEXT_ONLY = ("max_tokens", "quotas", "purpose", "detail", "dedup_turns", "exclude_uris", "peer_scope",
                "other_peer_penalty", "rewrite", "rewrite_max_bullets")


def context_fields_given(req: SearchRequest) -> list[str]:
    """The context-only parameters a request carries (refused in list mode, docs/design/retrieval-api.md)."""
    return [f for f in CONTEXT_ONLY if getattr(req, f) is not UNSET]


class RecallRequest(SearchRequest, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """The auto-recall preset (docs/design/context-assembly.md): search's parameters, other defaults, and the
    deprecated v1 names folded onto them."""

    max_chars: Annotated[int, Meta(ge=1, le=1_000_000)] | UnsetType = UNSET
    min_score: float | UnsetType = UNSET
    render: bool | Literal["full", "compact"] | UnsetType = UNSET


class MatchedContext(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One hit of find or search: the node, its score, level and abstract, and why it matched."""

    context_type: str
    uri: str
    level: int
    score: float
    category: str = ""
    match_reason: str = ""
    abstract: str = ""
    overview: str | None = None
    content: str | None = None
    tags: list[str] | None = None
    origin_score: float | None = None
    time_score: float | None = None
    provenance: dict[str, Any] | None = None
    location: str = ""  # a section of a long document: "lines 812-840" (PDF: "page 7, lines ...")
    active_count: int = 0  # times it was served in a context block or reported used (sessions.used)


class ShardFindRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Internal (retriever -> one shard's retrievers): a find answered from that shard's rows, with
    the query's vector as the first retriever embedded it (little-endian float32, by `model`), so a
    search spanning shards embeds once. A vector of another model or size is embedded again."""

    find: FindRequest
    vector: bytes = b""
    model: str = ""


class PlannedQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One query of a list search's plan as the asking retriever made it: its text, the context type
    it searches (None: every type), why it was planned, and its vector (little-endian float32 by the
    request's `model`; empty: the shard embeds it, as for a keyword search, which needs none)."""

    query: str
    context_type: str | None = None
    intent: str = ""
    priority: int = 3
    vector: bytes = b""


class ShardSearchRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Internal (retriever -> one shard's retrievers): a list search answered from that shard's rows
    with the plan the asking retriever made, so a search spanning shards runs its intent analysis (a
    model call, with a session) once, every shard searches the same queries, and each query is
    embedded once."""

    search: SearchRequest
    queries: list[PlannedQuery]
    reasoning: str = ""
    status: str = "original"
    error: str | None = None
    model: str = ""


class ShardError(msgspec.Struct, kw_only=True):
    """A shard of a sharded index that did not answer in time: its rows are missing from the reply."""

    shard: int
    code: str
    message: str


class FindResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The reply of `search.find`."""

    memories: list[MatchedContext]
    resources: list[MatchedContext]
    skills: list[MatchedContext]
    total: int
    query_plan: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None
    # A sharded index's shards that the scope spans and that did not answer (never a silent
    # partial answer); absent when every shard answered.
    missing_shards: list[ShardError] = []


class GrepRequest(_Req, frozen=True):
    """The request of `search.grep`: regular-expression search over file contents."""

    uri: Uri
    pattern: Annotated[str, Meta(min_length=1, max_length=4096)]
    case_insensitive: bool = False
    node_limit: NodeLimit = 256
    exclude_uri: str | None = None
    level_limit: Annotated[int, Meta(ge=0, le=64)] = 10
    tags: list[str] | None = None
    include_tags: bool = False
    before_context: Annotated[int, Meta(ge=0, le=100)] = 0
    after_context: Annotated[int, Meta(ge=0, le=100)] = 0


class ContextLine(msgspec.Struct, kw_only=True):
    """A line around a grep match."""

    line: int
    content: str


class GrepMatch(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line that matched, with its file, line number and context lines."""

    uri: str
    line: int
    content: str
    before_context: list[ContextLine] | None = None
    after_context: list[ContextLine] | None = None
    tags: list[str] | None = None


class GrepResult(msgspec.Struct, kw_only=True):
    """The reply of `search.grep`."""

    matches: list[GrepMatch]
    count: int
    truncated: bool = False


class GlobRequest(_Req, frozen=True):
    """The request of `search.glob`: match paths against a glob pattern."""

    pattern: Annotated[str, Meta(min_length=1, max_length=4096)]
    uri: Uri = "viking://"
    node_limit: NodeLimit = 256
    extra_fields: list[str] | None = None
    tags: list[str] | None = None
    include_tags: bool = False


class GlobResult(msgspec.Struct, kw_only=True):
    """The reply of `search.glob`."""

    matches: list[Any]  # URI strings, or objects with `uri` when extra fields or tags are asked for
    count: int
    truncated: bool = False
