"""BM25 over champion lists for terms in very many rows: the same top rows as scoring every
posting for such a term, rows added since the list was chosen included, changed rows left out,
a narrow scope answered exactly, and the lists chosen ahead of the first searches after a
load or a long ingest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from skald.store import bm25, bm25_math
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
    exact, exact_scores = bm25_math.top(*kw._scores(query_terms("gateway"), prune=False)[:2], 5, every)
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


def test_a_champion_list_is_weighed_once_between_writes(small_lists: None) -> None:
    """Between two writes every search of a frequent term reads the same champion labels and
    weights (chosen and weighed by the first); a write makes the next search weigh them again."""
    kw = corpus()
    terms = query_terms("gateway")
    labels, weights, pruned = kw._scores(terms, prune=True)
    again = kw._scores(terms, prune=True)
    assert pruned and again[0] is labels and again[1] is weights
    kw.add(500, "gateway gateway gateway gateway gateway gateway gateway gateway")
    after = kw._scores(terms, prune=True)
    assert after[1] is not weights and 500 in after[0].tolist()


def test_a_narrow_scope_is_answered_exactly(small_lists: None) -> None:
    kw = corpus()
    champions = set(kw.search("gateway", 8, every)[0].tolist())
    outside = [i for i in range(200) if i not in champions][:3]
    only = np.asarray(outside)
    got = kw.search("gateway", 3, lambda labels: np.isin(labels, only))[0].tolist()
    assert sorted(got) == sorted(outside)


def test_a_narrow_scope_is_searched_through_a_mask_of_its_rows(small_lists: None) -> None:
    """A scope of few rows: the same top rows and scores as testing the scope row by row over
    every posting, while the row-by-row test is asked about the scope's postings only."""
    from skald.messages.index import IndexRow
    from skald.store.index import Query, VectorIndex
    from skald.store.index import keywords as index_keywords

    rng = np.random.default_rng(5)
    idx = VectorIndex(8, "m")
    rows = []
    for i in range(600):
        words = ["gateway"] * int(1 + i % 7) + ["filler"] * int(5 + i % 11) + (["zebra"] if i % 13 == 3 else [])
        v = rng.normal(size=8).astype(np.float32)
        rows.append((IndexRow(account="a", uri=f"viking://resources/p{i % 30}/f{i}.md", level=2,
                              parent_uri=f"viking://resources/p{i % 30}", context_type="resource",
                              text=" ".join(words), model="m"), v / np.linalg.norm(v)))
    idx.upsert_many(rows)
    q = Query(account="a", prefixes=["viking://resources/p7"])
    asked: list[int] = []
    plain = idx._allow_many

    def counting(labels: np.ndarray, query: Query) -> np.ndarray:
        asked.append(labels.size)
        return plain(labels, query)

    idx._allow_many = counting  # type: ignore[method-assign]
    narrow = idx.keyword_arrays("gateway zebra", q, 10)
    narrow_asked = sum(asked)
    asked.clear()
    index_keywords.NARROW_MIN, saved = 0, index_keywords.NARROW_MIN
    try:
        index_keywords.NARROW_SHARE, share = 0.0, index_keywords.NARROW_SHARE
        broad = idx.keyword_arrays("gateway zebra", q, 10)
    finally:
        index_keywords.NARROW_MIN, index_keywords.NARROW_SHARE = saved, share
    assert narrow[0].tolist() == broad[0].tolist() and np.allclose(narrow[1], broad[1])
    assert len(narrow[0]) == 10 and all(idx.row_at(lab).uri.startswith("viking://resources/p7/")
                                        for lab in narrow[0].tolist())
    assert narrow_asked <= 20 < sum(asked)  # the scope's 20 rows, against every posting of "gateway"


def test_warming_chooses_the_champion_lists_a_search_would(small_lists: None, tmp_path: Path) -> None:
    """After a load and more writes, `warm_champions` chooses the lists of exactly the terms a
    search scores over one (in a snapshot's ranges, in the tail written since, or made by a
    removal), and searches answer as they do without it."""
    from skald.store import bm25_snapshot

    def loaded() -> KeywordIndex:
        bm25_snapshot.save(corpus(), tmp_path, bm25_snapshot.generations(corpus(), 200))
        kw, _ = bm25_snapshot.load(tmp_path)
        for i in range(300, 330):  # a frequent term written after the load: a range of the tail
            kw.add(i, "yak " * (1 + i % 3) + "meadow")
        kw.remove(7)  # "gateway" and "filler" lose a row: their Postings are made
        return kw

    warm, cold = loaded(), loaded()
    frequent = {warm._tid[t] for t in ("gateway", "filler", "yak", "meadow")}  # in more than 16 rows
    assert warm.warm_champions() == 4
    chosen = {tid for tid in range(len(warm._post)) if warm._post._items[tid] is not None
              and warm._post._items[tid].champ is not None}
    assert chosen == frequent  # not "zebra" (4 rows)
    for q in ("gateway", "gateway zebra", "yak meadow", "filler gateway yak"):
        a, b = warm.search(q, 6, every), cold.search(q, 6, every)
        assert a[0].tolist() == b[0].tolist() and np.allclose(a[1], b[1])
    assert warm._post.frequent(16, 100) == sorted({warm._tid["yak"], warm._tid["meadow"]})  # 199 rows: above


def test_a_loaded_replica_warms_its_champion_lists(small_lists: None) -> None:
    """The replica's warm-up after a snapshot load chooses the frequent terms' champion lists
    beside serving the rows, so no first search pays for one."""
    from skald.actors.retriever.replica import IndexReplica
    from skald.messages.index import IndexRow
    from skald.store.index import VectorIndex

    rng = np.random.default_rng(3)
    idx = VectorIndex(8, "m")
    rows = []
    for i in range(40):
        v = rng.normal(size=8).astype(np.float32)
        rows.append((IndexRow(account="a", uri=f"viking://resources/f{i}.md", level=2, parent_uri="viking://resources",
                              context_type="resource", text="gateway " * (1 + i % 5) + f"code{i}", model="m"),
                     v / np.linalg.norm(v)))
    idx.upsert_many(rows)
    IndexReplica._warm(idx)
    post = idx.keywords._post[idx.keywords._tid["gateway"]]
    assert post.champ is not None and post.champ[0].size == bm25.CHAMPIONS


def test_a_term_thinned_after_the_warm_up_listed_it_is_skipped(small_lists: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up lets the lock go between terms: a term removals have thinned below the
    champion size since it was listed is left for the searches (choosing its list would fail)."""
    kw = corpus()
    zebra = kw._tid["zebra"]  # in 4 rows, fewer than a champion list holds
    monkeypatch.setattr(type(kw._post), "frequent", lambda self, low, high: [zebra])
    assert kw.warm_champions() == 1
    assert kw._post._items[zebra] is None or kw._post._items[zebra].champ is None
