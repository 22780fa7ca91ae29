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
