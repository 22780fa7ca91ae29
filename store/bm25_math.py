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


# Past this many entries `top` finds its candidates without partitioning all of them: a threshold
# read off a partition of one entry in SAMPLE_STEP, then one comparison of all. A full
# `argpartition` of 30,000 summed postings was 0.10 ms of a 0.41 ms keyword search at 315,000 rows,
# and a second one followed whenever a row's repeats (one entry a term it holds) left fewer than k
# labels among the entries taken; three times as many are taken now.
SAMPLED_FROM = 4_096
SAMPLE_STEP = 8


def top(hit: np.ndarray, scores: np.ndarray, k: int,
         allow: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The k best allowed labels, best first, ties by label (a label tied with the k-th is never
    left out for one after it). A label may repeat in `hit` (with the same score each time,
    `KeywordIndex._scores`): it is kept once."""
    if not hit.size:
        return EMPTY_LABELS, EMPTY_SCORES
    want = min(hit.size, 3 * max(k + k // 4, 64))  # most rows pass `allow`: ask it about few more than k
    while True:
        pick = _first(hit, scores, want) if want < hit.size else np.arange(hit.size)
        pick = pick[np.lexsort((hit[pick], -scores[pick]))]
        if pick.size > 1:  # a repeated label's entries sort side by side: the first stays
            pick = pick[np.concatenate(([True], hit[pick[1:]] != hit[pick[:-1]]))]
        labels = hit[pick]
        ok = allow(labels)
        labels, best = labels[ok][:k], scores[pick][ok][:k].astype(np.float64)
        if labels.size >= k or want >= hit.size:
            return labels, best
        want = min(hit.size, want * 4)


def _first(hit: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """The n first entries (n < hit.size) by score, best first, ties by label, in no order: work in
    proportion to the entries, however many share the n-th score (rows of one template do)."""
    if hit.size >= SAMPLED_FROM:  # every entry left out scores below every one kept
        sample = scores[::SAMPLE_STEP]
        m = min(sample.size, -(-2 * n // SAMPLE_STEP))  # about 2n entries expected at or above it
        pick = np.flatnonzero(scores >= np.partition(sample, sample.size - m)[sample.size - m])
        if n <= pick.size <= 8 * n:  # else ties crowd the threshold: the whole array is cheaper
            s = scores[pick]
            nth = np.partition(s, s.size - n)[s.size - n]
            above, tied = pick[s > nth], pick[s == nth]
            return np.concatenate((above, _lowest(hit, tied, n - above.size)))
    nth = np.partition(scores, scores.size - n)[scores.size - n]
    above = np.flatnonzero(scores > nth)
    return np.concatenate((above, _lowest(hit, np.flatnonzero(scores == nth), n - above.size)))


def _lowest(hit: np.ndarray, tied: np.ndarray, need: int) -> np.ndarray:
    """The `need` entries of `tied` (one score) of lowest label; many are first cut by a label read
    off a sample, as `_first` cuts by score (a term's entries come in label order, which numpy's
    partition takes five times as long over as over shuffled labels)."""
    if tied.size <= need:
        return tied
    lab = hit[tied]
    if tied.size >= SAMPLED_FROM:
        sample = lab[::SAMPLE_STEP]
        m = min(sample.size - 1, -(-need // SAMPLE_STEP))
        few = np.flatnonzero(lab <= np.partition(sample, m)[m])
        if need <= few.size <= 8 * need:
            tied, lab = tied[few], lab[few]
    return tied[np.argpartition(lab, need - 1)[:need]]
