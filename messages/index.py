"""Index rows as they travel on the index stream (one subject per row, latest kept)."""

from __future__ import annotations

import msgspec


class IndexRow(msgspec.Struct, kw_only=True, frozen=True):
    """One retrievable node: a file or a section (level 2), a directory's or a long document's
    abstract (0) / overview (1).

    `uri` is the node itself (the directory for levels 0 and 1); the `.abstract.md` /
    `.overview.md` suffix is added when it is served. `vector` is packed by `store/vector_bytes.py`:
    float16 after a marker byte (float32, little-endian, in rows written before it).
    """

    account: str
    uri: str
    level: int
    parent_uri: str
    context_type: str
    category: str = ""
    abstract: str = ""
    tags: tuple[str, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0
    active_count: int = 0
    owner: str = ""
    content_hash: str = ""
    model: str = ""
    text: str = ""  # what keyword (BM25) search reads: the file's text (bounded), or the L0/L1 text
    vector: bytes = b""
    # A long document is a node (levels 0 and 1, kind "document") whose level-2 children are its
    # sections (kind "section", URI `<document>#<anchor>`, text = the section's own text).
    kind: str = ""
    title: str = ""  # a section's heading path (on the stream; the index does not keep it)
    start_line: int = 0
    end_line: int = 0
    page: int = 0
    # The language the text is written in (ISO 639-1, `store/language.py`), identified when the row
    # is built: the keyword index stems its words in it. "" (a row built before rows carried it): English.
    lang: str = ""


class IndexDelete(msgspec.Struct, kw_only=True, frozen=True):
    """The removal of one index row."""

    account: str
    uri: str
    level: int


class IndexChange(msgspec.Struct, kw_only=True, frozen=True):
    """The body of one message on the index stream."""

    upsert: IndexRow | None = None
    delete: IndexDelete | None = None
