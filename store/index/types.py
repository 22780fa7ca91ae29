"""What the vector index is asked and answers: queries, hits, row keys, and its tuning constants."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import methodcaller

from skald.messages.index import IndexRow

BRUTE_FORCE_MAX = 8_000  # rows; below this an exact matrix product beats the graph walk
SMALL_INDEX = 2_000  # the whole index is scored exactly while it is this small
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_SEARCH = 64  # recall@10 ~0.998 at 100k clustered rows (docs/design/vectors.md)
CONTEXT_TYPES = ("resource", "memory", "skill")


def text_held(level: int, kind: str) -> bool:
    """Whether the index keeps a row's text in its text heap rather than on the row: a leaf's
    (read back for the passages served) and a long document's table of contents (its L1 row),
    which grows with the document's sections (a line each, about 10 KB for 40) and is read only
    when that document is served or its overview asked for."""
    return level == 2 or (level == 1 and kind == "document")


def row_digest(row: IndexRow) -> int:
    """What `content_hash` holds of one row: its name, content and time, 128 bits."""
    key = _NAME.format(row.account, row.uri, row.level)
    h = hashlib.blake2b(f"{key}\x00{row.content_hash}\x00{row.updated_at!r}".encode(), digest_size=16)
    return int.from_bytes(h.digest(), "big")


_NAME = "{}\x00{}\x00{}"  # account, URI, level: what names a row on the stream, in digests and as foreign
# A section's '#' becomes '/' and a control character no URI holds, so a section sorts, and scopes,
# inside its document's subtree and still never meets a path: `d.md#b` is `d.md/\x01b`, not `d.md/b`.
_SECTION = "/\x01"
_ROW_KEY = "{}\x00{}/\x00{}"  # account, URI as above, level
_SCOPE_KEY = "{}\x00{}/"  # account, URI as above


def row_key(account: str, uri: str, level: int) -> str:
    """The key the index finds a row by, and sorts its rows by: its scope key (`scope_key`) and
    level, so the one string per row serves both (a scope's rows are those whose key starts with
    its scope key)."""
    return _ROW_KEY.format(account, uri.replace("#", _SECTION), level)


def row_name(account: str, uri: str, level: int) -> str:
    """A row's name as the stream and the digests have always written it (`row_key` sorts
    differently)."""
    return _NAME.format(account, uri, level)


def scope_key(account: str, uri: str) -> str:
    """A section (`<doc>#<anchor>`) sorts, and scopes, inside its document's subtree."""
    return _SCOPE_KEY.format(account, uri.replace("#", _SECTION))


def row_keys(accounts: Iterable[str], uris: Iterable[str], levels: Iterable[int]) -> list[str]:
    """`row_key` of many rows, formatted in C (a snapshot's load makes one per row)."""
    return list(map(_ROW_KEY.format, accounts, map(methodcaller("replace", "#", _SECTION), uris), levels))


def row_subject_token(account: str, uri: str, level: int) -> str:
    """A NATS-safe token naming one row (its subject on the index stream)."""
    return hashlib.sha1(row_name(account, uri, level).encode()).hexdigest()


@dataclass(slots=True)
class Query:
    """Everything a search may restrict; `None` means unrestricted."""

    account: str
    prefixes: list[str] | None = None  # canonical viking:// URIs (directories or files)
    levels: frozenset[int] | None = None
    context_types: frozenset[str] | None = None
    since: float | None = None
    until: float | None = None
    time_field: str = "updated_at"
    predicate: Callable[[IndexRow], bool] | None = None  # tags, metadata filter, ...


@dataclass(slots=True)
class Hit:
    """One row a search found, with its score and what the caller's filters made of it."""

    row: IndexRow
    score: float
    keep: bool = True  # passes the caller's collection filter (search_children_many with `collect`)
    gate: float | None = None  # what a threshold compares, when not the score (hybrid: strong keyword evidence only)
    label: int = -1  # the row's slot in this index (-1: not known), so callers need no key lookup
    novelty: float = 0.0  # what the query's best hit must clear its threshold by to answer at all (hybrid)


@dataclass(slots=True)
class SearchTrace:
    """How a search was answered: by which engine, over how many rows in scope, examining how many."""

    engine: str
    scope_rows: int
    examined: int
