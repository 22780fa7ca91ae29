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


# Past this many entries `top` first cuts them to those at or above a threshold read off a strided
# sample (a partition of one entry in SAMPLE_STEP, then one comparison of all), then orders those:
# a full `argpartition` of 30,000 summed postings was 0.10 ms of a 0.41 ms keyword search at
# 315,000 rows, and a second one followed whenever a row's repeats (one entry a term it holds)
# left fewer than k labels among the first `want`.
SAMPLED_FROM = 4_096
SAMPLE_STEP = 8


def top(hit: np.ndarray, scores: np.ndarray, k: int,
         allow: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The k best allowed labels, best first, ties by label (a label tied with the k-th is never
    left out for one after it). A label may repeat in `hit` (with the same score each time,
    `KeywordIndex._scores`): it is kept once."""
    if not hit.size:
        return EMPTY_LABELS, EMPTY_SCORES
    want = min(hit.size, max(k + k // 4, 64))  # most rows pass `allow`: ask it about few more than k
    if hit.size >= SAMPLED_FROM:
        sample = scores[::SAMPLE_STEP]
        m = min(sample.size, -(-3 * want // SAMPLE_STEP))  # about 3 x want entries expected above it
        floor = np.partition(sample, sample.size - m)[sample.size - m]
        above = np.flatnonzero(scores >= floor)
        got = _best(hit, scores, above, k, allow)
        # Every entry left out scores below every one kept: with k allowed labels kept, they are
        # the k best (a tie at the k-th is never split, since the floor is a score some entry has).
        if got[0].size >= k:
            return got
        want = min(hit.size, max(want, 4 * above.size))  # the filter passed few: look further at once
    while True:
        if want < hit.size:  # the want best, and every entry tied with the last of them
            pick = np.argpartition(-scores, want - 1)[:want]
            pick = np.flatnonzero(scores >= scores[pick].min())
        else:
            pick = np.arange(hit.size)
        labels, best = _best(hit, scores, pick, k, allow)
        if labels.size >= k or want >= hit.size:
            return labels, best
        want = min(hit.size, want * 4)


def _best(hit: np.ndarray, scores: np.ndarray, pick: np.ndarray, k: int,
          allow: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The k best allowed labels among the entries `pick`, best first, ties by label, each once."""
    pick = pick[np.lexsort((hit[pick], -scores[pick]))]
    if pick.size > 1:  # a repeated label's entries sort side by side: the first stays
        pick = pick[np.concatenate(([True], hit[pick[1:]] != hit[pick[:-1]]))]
    labels = hit[pick]
    ok = allow(labels)
    return labels[ok][:k], scores[pick][ok][:k].astype(np.float64)
