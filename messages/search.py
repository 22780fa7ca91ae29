"""find / search (list) / grep / glob, field for field as seed 004 documents them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

Uri = Annotated[str, Meta(min_length=1, max_length=4096)]
Limit = Annotated[int, Meta(ge=1, le=10_000)]
NodeLimit = Annotated[int, Meta(ge=1, le=100_000)]
ContextType = Literal["memory", "resource", "skill"]


class _Req(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class FindRequest(_Req):
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


class SearchRequest(FindRequest, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """seed 004 `search()`: find's parameters plus session-aware planning and the search type.
    `mode="context"` belongs to the assembler."""

    search_type: Literal["semantic", "keywords", "hybrid"] = "semantic"
    mode: Literal["list", "context"] = "list"
    session_id: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    score_gte: bool = False


class MatchedContext(msgspec.Struct, kw_only=True, omit_defaults=True):
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


class FindResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    memories: list[MatchedContext]
    resources: list[MatchedContext]
    skills: list[MatchedContext]
    total: int
    query_plan: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None


class GrepRequest(_Req):
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
    line: int
    content: str


class GrepMatch(msgspec.Struct, kw_only=True, omit_defaults=True):
    uri: str
    line: int
    content: str
    before_context: list[ContextLine] | None = None
    after_context: list[ContextLine] | None = None
    tags: list[str] | None = None


class GrepResult(msgspec.Struct, kw_only=True):
    matches: list[GrepMatch]
    count: int
    truncated: bool = False


class GlobRequest(_Req):
    pattern: Annotated[str, Meta(min_length=1, max_length=4096)]
    uri: Uri = "viking://"
    node_limit: NodeLimit = 256
    extra_fields: list[str] | None = None
    tags: list[str] | None = None
    include_tags: bool = False


class GlobResult(msgspec.Struct, kw_only=True):
    matches: list[Any]  # URI strings, or objects with `uri` when extra fields or tags are asked for
    count: int
    truncated: bool = False
