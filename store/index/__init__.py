"""The vector index: rows of every account with a vector graph (hnswlib's, or faiss's over 8-bit
codes) and exact numpy search, plus the keyword index beside it.

Scopes are URI prefixes. Rows are kept in a sorted list of `account NUL uri/` keys, so the rows
under a prefix are one contiguous slice found by bisection, and accounts can never see each
other's rows. One object holds it all under one lock; its parts live in modules by concern (rows
and their writes, scopes, vector search, keywords, snapshots), each a class over the same state.
"""

from __future__ import annotations

from skald.store.index.keywords import IndexKeywords
from skald.store.index.reads import IndexReads
from skald.store.index.search import IndexSearch
from skald.store.index.snapshot import SNAPSHOT_FILES, IndexSnapshot
from skald.store.index.types import (
    BRUTE_FORCE_MAX,
    CONTEXT_TYPES,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
    SMALL_INDEX,
    Hit,
    Query,
    SearchTrace,
    row_key,
    row_subject_token,
)


class VectorIndex(IndexSnapshot, IndexKeywords, IndexSearch, IndexReads):
    """Thread-safe for one writer and many readers through a single lock (writes are short)."""


__all__ = ["BRUTE_FORCE_MAX", "CONTEXT_TYPES", "HNSW_EF_CONSTRUCTION", "HNSW_EF_SEARCH", "HNSW_M", "SMALL_INDEX",
           "SNAPSHOT_FILES", "Hit", "Query", "SearchTrace", "VectorIndex", "row_key", "row_subject_token"]
