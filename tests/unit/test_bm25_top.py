"""The top k of a keyword search's summed postings: the k best labels a filter allows, best first,
ties by label, each label once though it has an entry for every query term it holds. Whether the
entries are cut by a sampled threshold first (many of them) or partitioned (few, or when the
threshold kept too few allowed labels), the answer is the one a full sort gives."""

from __future__ import annotations

import numpy as np
import pytest

from skald.store import bm25_math


def by_full_sort(hit: np.ndarray, scores: np.ndarray, k: int, ok: np.ndarray) -> list[int]:
    labels: list[int] = []
    seen: set[int] = set()
    for i in np.lexsort((hit, -scores)).tolist():
        if int(hit[i]) in seen:
            continue
        seen.add(int(hit[i]))
        if ok[i]:
            labels.append(int(hit[i]))
        if len(labels) == k:
            break
    return labels


def summed(rng: np.random.Generator, rows: int, terms: int, per_term: int, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    """Entries as `KeywordIndex._scores` gives them: each term's labels, each entry the label's sum."""
    scratch = np.zeros(rows, dtype=np.float32)
    parts = []
    for _ in range(terms):
        labels = rng.choice(rows, min(rows, per_term), replace=False)
        weights = (rng.integers(1, 5, labels.size) * 0.5 if ties else rng.random(labels.size)).astype(np.float32)
        scratch[labels] += weights
        parts.append(labels)
    hit = np.concatenate(parts).astype(np.int64)
    return hit, scratch[hit]


@pytest.mark.parametrize("per_term", [300, 12_000], ids=["partitioned", "sampled"])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "tied"])
def test_the_top_k_is_what_a_full_sort_gives(per_term: int, ties: bool) -> None:
    rng = np.random.default_rng(per_term + ties)
    for trial in range(24):
        hit, scores = summed(rng, rows=20_000, terms=1 + trial % 3, per_term=per_term, ties=ties)
        k = (1, 10, 100, 150)[trial % 4]
        every = trial % 2 == 0
        allow = (lambda labels: np.ones(labels.size, dtype=bool)) if every else (lambda labels: labels % 3 == 0)
        labels, best = bm25_math.top(hit, scores, k, allow)
        assert labels.tolist() == by_full_sort(hit, scores, k, allow(hit))
        assert best.tolist() == sorted(best.tolist(), reverse=True)


def test_a_filter_that_passes_few_rows_still_gets_its_k() -> None:
    """The threshold keeps about three times the k best entries; when the filter allows almost
    none of them, the search goes on past the threshold rather than answering short."""
    rng = np.random.default_rng(5)
    hit, scores = summed(rng, rows=50_000, terms=2, per_term=20_000, ties=False)
    allowed = set(rng.choice(hit, 40, replace=False).tolist())
    allow = lambda labels: np.fromiter((int(x) in allowed for x in labels), dtype=bool, count=labels.size)  # noqa: E731
    labels, _ = bm25_math.top(hit, scores, 30, allow)
    assert labels.tolist() == by_full_sort(hit, scores, 30, allow(hit))
    assert len(labels) == 30
