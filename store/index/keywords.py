"""Keyword (BM25) questions asked of the index's rows: the index keeps one `KeywordIndex` beside
its vectors, labelled alike, and these wrappers translate rows and scopes into its labels."""

from __future__ import annotations

import numpy as np

from skald.messages.index import IndexRow
from skald.store.index.scopes import IndexScopes
from skald.store.index.types import Hit, Query, row_key

# A scope of at most NARROW_SHARE of the rows (or NARROW_MIN rows) is searched by keywords through
# a mask of its rows: one gather over each query term's postings instead of a scope test per row.
NARROW_SHARE = 0.05
NARROW_MIN = 2_000
SHARE_SAMPLE = 256  # a word's rows looked at to tell what share of a scope holds it


class IndexKeywords(IndexScopes):
    """The index's keyword (BM25) questions: rows and scopes translated into the keyword index's labels."""

    def keyword_coverage(self, text: str, rows: list[IndexRow]) -> list[float]:
        """`KeywordIndex.coverage` of each row (0.0 for a row no longer indexed)."""
        with self._lock:
            labels = [self._labels.get(row_key(r.account, r.uri, r.level), -1) for r in rows]
        return self.keywords.coverage(text, labels)

    def keyword_coverage_labels(self, text: str, labels: list[int]) -> list[float]:
        return self.keywords.coverage(text, labels)

    def words_in(self, text: str, account: str, rows: list[tuple[str, int]]) -> list[list[str]]:
        """For each (uri, level), the words of a query its row's text holds (`KeywordIndex.words_in`)."""
        labels = [self._labels.get(row_key(account, uri, level), -1) for uri, level in rows]
        return self.keywords.words_in(text, labels)

    def word_shares(self, text: str, scopes: list[Query], least: float) -> dict[str, float]:
        """For each word of `text`, the largest share of one scope's rows that hold it, for the
        words that may hold `least` of one; 0 for the rest. A scope that is every row (an index of
        one account) takes the word's document frequency as it is; another counts the word's rows
        inside it from an even sample of them (SHARE_SAMPLE), so a name nearly every row of one
        user's memories holds is seen as such in an index of many users."""
        held = self.keywords.holders(text, SHARE_SAMPLE)
        out = dict.fromkeys(held, 0.0)
        for q in scopes:
            ranges = self._ranges(q.account, q.prefixes)
            rows = sum(hi - lo for lo, hi in ranges)
            for w, (df, sample) in held.items():
                if not rows or df < least * rows or not sample.size:
                    continue
                inside = df if self._whole(ranges) else df * float(np.mean(self._allow_many(
                    sample, Query(account=q.account, prefixes=q.prefixes))))
                out[w] = max(out[w], inside / rows)
        return out

    def absent_share(self, text: str) -> tuple[float, int]:
        """`KeywordIndex.absent_share` (how much of a query no indexed text mentions), and the size
        of the vocabulary that judgement rests on."""
        return self.keywords.absent_share(text), self.keywords.vocabulary()

    def keywords_mapped(self) -> bool:
        """Whether the keyword index reads postings from a snapshot's file (it was loaded or taken up)."""
        return self.keywords.from_snapshot

    def warm_keywords(self) -> int:
        """`KeywordIndex.warm_champions`: the frequent terms' champion lists chosen ahead of the searches."""
        return self.keywords.warm_champions()

    def keyword_search(self, text: str, q: Query, k: int) -> list[Hit]:
        """BM25 over the rows the query allows."""
        with self._lock:
            labels, scores = self.keyword_arrays(text, q, k)
            rows = self._rows
            return [Hit(r, s, label=lab) for lab, s in zip(labels.tolist(), scores.tolist(), strict=True)
                    if (r := rows[lab]) is not None]

    def keyword_arrays(self, text: str, q: Query, k: int) -> tuple[np.ndarray, np.ndarray]:
        """`keyword_search` as (labels, BM25 scores) arrays, best first: no hit objects for rows
        a caller only scores."""
        with self._lock:
            return self.keywords.search(text, k, lambda labels: self._allow_many(labels, q), self._narrow(q))

    def _narrow(self, q: Query) -> np.ndarray | None:
        """A mask by label of a scope holding few of the index's rows (None: a broad one). Checking
        the scope row by row costs a Python string test each: asked of every posting of a query's
        frequent terms it was most of a find inside one project (22.6 ms p50 at a million rows,
        `bench/shards.py`); a mask of the scope's rows, made from its slices of the sorted keys,
        is one array lookup for all of them."""
        if q.prefixes is None:
            return None
        ranges = self._ranges(q.account, q.prefixes)
        if sum(hi - lo for lo, hi in ranges) > max(NARROW_MIN, int(self._live * NARROW_SHARE)):
            return None
        mask = np.zeros(len(self._alive), dtype=bool)
        for lo, hi in ranges:
            mask[self._sorted_labels[lo:hi]] = True
        return mask
