"""BM25's arithmetic over arrays, apart from the index that keeps the postings (`store/bm25.py`):
a term's weights for its rows, its IDF, and the top k of summed scores a filter allows."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

K1 = 1.2
B = 0.75

EMPTY_LABELS = np.zeros(0, dtype=np.int64)
EMPTY_SCORES = np.zeros(0, dtype=np.float64)


def marked(mask: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """`mask[labels]`, False for a label past the mask's end."""
    if labels.size and int(labels.max()) >= mask.size:
        out = np.zeros(labels.size, dtype=bool)
        ok = labels < mask.size
        out[ok] = mask[labels[ok]]
        return out
    return mask[labels]


def idf(n: int, df: int) -> float:
    """BM25's IDF of a term in df of n rows (Lucene's, never negative)."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # shared by every search until the next write: never changed in place
    return a


def weights(tf: np.ndarray, dl: np.ndarray, idf: float, avgdl: float) -> np.ndarray:
    """BM25 term weights, idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl)), in float32
    and in place: two temporaries instead of eight, about half the time of the written-out formula
    (numpy's per-operation cost is most of it at a few hundred postings)."""
    den = dl * np.float32(K1 * B / avgdl)  # a new array: `dl` is a gather, tf may be the postings' own
    den += np.float32(K1 * (1 - B))
    den += tf
    out = tf * np.float32(idf * (K1 + 1))
    out /= den
    return out


def top(hit: np.ndarray, scores: np.ndarray, k: int,
         allow: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The k best allowed labels, best first, ties by label. A label may repeat in `hit` (with
    the same score each time, `KeywordIndex._scores`): it is kept once."""
    if not hit.size:
        return EMPTY_LABELS, EMPTY_SCORES
    want = min(hit.size, max(k + k // 4, 64))  # most rows pass `allow`: ask it about few more than k
    while True:
        top = np.argpartition(-scores, want - 1)[:want] if want < hit.size else np.arange(hit.size)
        top = top[np.lexsort((hit[top], -scores[top]))]
        if top.size > 1:  # a repeated label's entries sort side by side: the first stays
            top = top[np.concatenate(([True], hit[top[1:]] != hit[top[:-1]]))]
        labels = hit[top]
        ok = allow(labels)
        labels, best = labels[ok][:k], scores[top][ok][:k]
        if labels.size >= k or want >= hit.size:
            return labels, best.astype(np.float64)
        want = min(hit.size, want * 4)
