"""A term's BM25 weights are worked out once per write: repeated searches reuse them, any add or
remove makes them be worked out again (the row count and average length moved), the scores always
equal a freshly built index's, and the reuse is bounded by postings."""

from __future__ import annotations

import numpy as np
import pytest

from skald.store import bm25
from skald.store.bm25 import KeywordIndex

TEXTS = {i: f"restart the gateway {'gateway ' * (i % 4)}node-{i} {'timeout' if i % 3 == 0 else 'latency'}"
         for i in range(60)}


def every(labels: np.ndarray) -> np.ndarray:
    return np.ones(labels.size, dtype=bool)


def built(texts: dict[int, str]) -> KeywordIndex:
    kw = KeywordIndex()
    for label, text in texts.items():
        kw.add(label, text)
    return kw


def same(a: KeywordIndex, b: KeywordIndex, query: str) -> bool:
    (la, sa), (lb, sb) = a.search(query, 20, every), b.search(query, 20, every)
    return la.tolist() == lb.tolist() and np.allclose(sa, sb)


def test_weights_are_reused_until_a_write_and_match_a_fresh_index() -> None:
    kw = built(TEXTS)
    assert same(kw, built(TEXTS), "gateway timeout")
    tid = kw._tid["gateway"]
    first = kw._weighed[tid][2]
    assert not first.flags.writeable  # shared between searches: nobody may change it in place
    kw.search("restart gateway", 5, every)
    assert kw._weighed[tid][2] is first
    texts = {**TEXTS, 99: "gateway gateway gateway timeout"}
    kw.add(99, texts[99])
    assert same(kw, built(texts), "gateway timeout")
    assert kw._weighed[tid][2] is not first
    del texts[3]
    kw.remove(3)
    assert same(kw, built(texts), "gateway timeout latency")


def test_reuse_is_bounded_by_postings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25, "WEIGHTS_CACHED_MAX", 70)
    kw = built(TEXTS)
    kw.search("gateway", 5, every)  # 60 postings
    assert kw._weighed_size == 60
    kw.search("timeout", 5, every)  # 20 more would pass 70: the kept weights are dropped first
    assert set(kw._weighed) == {kw._tid["timeout"]} and kw._weighed_size == 20
    assert same(kw, built(TEXTS), "gateway timeout")


def test_a_batch_of_rows_indexes_as_the_rows_one_at_a_time() -> None:
    """`add_many` writes a batch's postings a term at a time; the index it builds is the one
    `add` builds row by row, a row given twice in one batch (its first text replaced) and a row
    replaced from an earlier batch included: the same postings, lengths and scores."""
    first = [(i, TEXTS[i], "en") for i in range(40)]
    second = [(i, TEXTS[i], "en") for i in range(40, 60)]
    second += [(5, "gateway rebuilt on node-5", "en"), (45, "latency on node-45 only", "en"),
               (45, "timeout gateway gateway node-45", "en")]  # 45 twice in this batch; 5 from the first
    one, many = KeywordIndex(), KeywordIndex()
    for label, text, lang in first + second:
        one.add(label, text, lang)
    many.add_many(first)
    many.add_many(second)
    assert one._tid == many._tid and np.array_equal(one._dl, many._dl) and one._total == many._total
    for a, b in zip(one._post, many._post, strict=True):
        assert (a.n, a.live) == (b.n, b.live)
        live_a = sorted(zip(*(x.tolist() for x in a.current(one._gen)), strict=True))
        assert live_a == sorted(zip(*(x.tolist() for x in b.current(many._gen)), strict=True))
    for query in ("gateway timeout", "latency node-45", "rebuilt gateway", "restart"):
        assert same(one, many, query), query
    labels, _ = many.search("rebuilt", 5, every)
    assert labels.tolist() == [5]
    assert 45 in many.search("timeout", 60, every)[0].tolist()
    assert 45 not in many.search("latency", 60, every)[0].tolist()  # its middle text is gone


def test_a_row_holding_several_query_terms_is_listed_once_with_their_sum() -> None:
    kw = built(TEXTS)
    labels, scores = kw.search("gateway timeout latency", 60, every)
    assert len(set(labels.tolist())) == labels.size == 60  # every row, each once
    alone = {}
    for word in ("gateway", "timeout", "latency"):
        lab, sc = kw.search(word, 60, every)
        for label, score in zip(lab.tolist(), sc.tolist(), strict=True):
            alone[label] = alone.get(label, 0.0) + score
    for label, score in zip(labels.tolist(), scores.tolist(), strict=True):
        assert score == pytest.approx(alone[label], rel=1e-5)
    assert scores.tolist() == sorted(scores.tolist(), reverse=True)
