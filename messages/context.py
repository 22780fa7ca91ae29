"""Context assembly on the wire: the reply of `search(mode="context")` / `recall`, and the
retriever's internal candidate request the assembler sends (one round trip for every bucket
and every expanded query)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from skald.messages.search import ContextType

Category = Literal["events", "entities", "preferences", "experiences", "memories", "resources", "skills"]
Tier = Literal["uri", "abstract", "overview", "full"]


class Bucket(msgspec.Struct, kw_only=True, frozen=True):
    """One retrieval sub-scope: a memory category, resources, skills, or everything (`all`)."""

    name: Annotated[str, Meta(min_length=1, max_length=32)]
    limit: Annotated[int, Meta(ge=1, le=1_000)]


class CandidatesRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Internal (assembler -> retriever). Filters pass through to every bucket unchanged."""

    queries: Annotated[list[Annotated[str, Meta(min_length=1, max_length=20_000)]], Meta(min_length=1, max_length=3)]
    buckets: Annotated[list[Bucket], Meta(min_length=1, max_length=8)]
    context_type: ContextType | list[ContextType] | None = None
    tags: list[str] | None = None
    filter: dict[str, Any] | None = None
    since: str | None = None
    until: str | None = None
    time_field: Literal["updated_at", "created_at"] = "updated_at"
    events_time_decay_protection: str | None = None
    score_threshold: float | None = None
    score_gte: bool = False
    exclude_uris: list[str] = []  # the caller's: exact, and as subtrees
    cooled_uris: list[str] = []  # the dedup ledger's: exact only
    cooled_prefixes: list[str] = []  # skill packages cool as a whole
    peer_scope: Literal["actor", "all"] = "all"
    other_peer_penalty: dict[str, float] = {}
    keywords_only: bool = False  # search_type=keywords: only rows BM25 found (still on the cosine scale)
    # The queries' vectors (little-endian float32, one per query, by `vector_model`) when a retriever
    # asking a sharded index's shards embedded them already; otherwise each shard embeds them.
    vectors: list[bytes] = []
    vector_model: str = ""


class Candidate(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One candidate entry for context assembly: what it is, its score, where it came from and its location."""

    uri: str  # served URI: a file, `<dir>/.overview.md`, or `<skill package>/SKILL.md`
    category: Category
    score: float
    raw: float = 0.0  # the similarity before calibration, to order ties of the clipped score
    is_dir: bool = False
    abstract: str = ""
    origin: Literal["self", "actor", "peer", "global"] = "self"
    updated_at: float = 0.0
    # Carried so the assembler reads no file: a section's own text (served at full tier), or a
    # long document's table of contents (its overview).
    text: str = ""
    location: str = ""  # a section's place in its document: "lines 812-840" or "page 7, lines ..."
    lines: tuple[int, int] | None = None
    page: int = 0  # a PDF section's first page


class CandidatesResult(msgspec.Struct, kw_only=True):
    """The reply of `search.candidates`."""

    buckets: dict[str, list[Candidate]]
    excluded: int = 0  # distinct served URIs dropped by exclude_uris
    cooled: int = 0  # ... by the dedup ledger
    # bucket (or `shard:<k>`, a shard of a sharded index that did not answer) -> why its
    # retrieval failed; the others still answer
    errors: dict[str, str] = {}
    embed_ms: float = 0.0  # query embedding time, so callers can tell their own time from the model's
    search_ms: float = 0.0  # the index searches (dense, keyword, their fusion), after the embedding
    shape_ms: float = 0.0  # shaping hits into candidates (collapse, exclusions, cut)


class ContextEntry(msgspec.Struct, kw_only=True):
    """One entry of a context block: the URI, its category, the tier it is served at and the text."""

    uri: str
    category: str
    score: float
    detail: Tier
    text: str
    origin: str = "self"
    location: str = ""  # a section's place in its document


class FillStats(msgspec.Struct, kw_only=True):
    """How the budget was filled: the floor every entry got, then the upgrades leftover tokens bought."""

    floor_tokens: int
    overview_upgrades: int
    full_upgrades: int
    spare_upgrades: int


class ContextStats(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a context block cost and why it holds what it holds. Every field without a default is
    always there; the others appear only when they apply."""

    candidates: int  # entries the budget was asked to place
    returned: int
    dropped: int  # left out by the budget
    deduped: int  # left out as a near-copy of an entry already placed
    max_tokens: int
    used_tokens: int
    per_entry_cap: int
    detail: Any  # the detail the request asked for, as it asked
    tier_counts: dict[str, int]
    fill: FillStats
    query_expansion: str  # off | ok | timeout | failed | ...
    rewrite: str  # off | ok | no_relevant | timeout | failed | ...
    rewrite_usage: dict[str, Any] | None  # the digest model's token usage, when known
    excluded: int  # distinct URIs dropped by exclude_uris
    dedup: dict[str, Any]  # the cross-turn ledger: status, turns, the turn it is at, cooled, malformed
    coverage: list[dict[str, Any]]  # what the budget cost: entries dropped or served below their tier
    planned_queries: list[str] | None = None  # the queries retrieval ran (not in bootstrap mode)
    uses_counted: int | None = None  # memories whose use count this block raised
    instructions_hash: str | None = None  # bootstrap: the version of the instructions served
    quotas: dict[str, int] | None = None
    retrieval_errors: dict[str, str] | None = None  # bucket -> why its retrieval failed
    # Files and transcripts whose stored text the store did not answer for (a lost connection, a
    # stream electing its leader): their entries are served from what the index holds, and the
    # turns beside a hit in such a transcript are left out. Asking again in a moment may serve them.
    unread: list[str] | None = None
    ignored: list[str] | None = None  # parameters this mode does not use
    deprecated: list[str] | None = None  # v1 aliases the request used
    telemetry: dict[str, float] | None = None  # milliseconds by stage, when asked for
    # The request named a session that did not exist: it was created (a session starts with its
    # first recall as with its first message), said here so a mistyped id does not pass unseen.
    session_created: bool = False


class ContextResult(msgspec.Struct, kw_only=True):
    """The reply of `search.recall`, `sessions.context`, `assemble.context`."""

    entries: list[ContextEntry]
    rendered: str
    digest: str
    stats: ContextStats
