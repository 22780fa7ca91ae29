"""BM25 over champion lists for terms in very many rows: the same top rows as scoring every
posting for such a term, rows added since the list was chosen included, changed rows left out,
and a narrow scope answered exactly."""

from __future__ import annotations

import numpy as np
import pytest

from skald.store import bm25
from skald.store.bm25 import KeywordIndex
from skald.store.terms import query_terms


@pytest.fixture
def small_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25, "CHAMPIONS", 8)
    monkeypatch.setattr(bm25, "CHAMPIONS_FROM", 16)
    monkeypatch.setattr(bm25, "COMMON_MIN_DF", 10_000)  # nothing counts as too common to score here


def every(labels: np.ndarray) -> np.ndarray:
    return np.ones(labels.size, dtype=bool)


def corpus() -> KeywordIndex:
    kw = KeywordIndex()
    for i in range(200):  # "gateway" in every row, more often in some; "zebra" in a few
        kw.add(i, " ".join(["gateway"] * (1 + i % 7) + ["filler"] * (5 + i % 11) + (["zebra"] if i % 50 == 3 else [])))
    return kw


def test_champion_lists_keep_the_top_rows(small_lists: None) -> None:
    kw = corpus()
    labels, scores = kw.search("gateway", 5, every)
    exact, exact_scores = bm25._top(*kw._scores(query_terms("gateway"), prune=False)[:2], 5, every)
    assert labels.tolist() == exact.tolist() and np.allclose(scores, exact_scores)
    # a rare word beside the common one: its rows come first whatever the champion list holds
    assert set(kw.search("gateway zebra", 4, every)[0].tolist()) == {3, 53, 103, 153}


def test_rows_added_or_changed_since_the_list_was_chosen(small_lists: None) -> None:
    kw = corpus()
    top = kw.search("gateway", 3, every)[0].tolist()
    kw.add(500, "gateway gateway gateway gateway gateway gateway gateway gateway")  # after the choice
    assert kw.search("gateway", 1, every)[0].tolist() == [500]
    kw.add(500, "nothing to see")
    kw.remove(top[0])
    got = kw.search("gateway", 3, every)[0].tolist()
    assert 500 not in got and top[0] not in got


def test_a_narrow_scope_is_answered_exactly(small_lists: None) -> None:
    kw = corpus()
    champions = set(kw.search("gateway", 8, every)[0].tolist())
    outside = [i for i in range(200) if i not in champions][:3]
    only = np.asarray(outside)
    got = kw.search("gateway", 3, lambda labels: np.isin(labels, only))[0].tolist()
    assert sorted(got) == sorted(outside)
