"""The float32 copies of rows waiting for the graph (`store/index/fresh.py`): pages that grow
without copying, freed once their rows are in the graph, read and scored across page edges."""

from __future__ import annotations

import numpy as np
import pytest

from skald.store.index import fresh as fresh_mod
from skald.store.index import signs
from skald.store.index.fresh import FreshRows

DIM = 16


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fresh_mod, "PAGE", 64)


def _mat(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def test_rows_read_back_and_score_across_page_edges() -> None:
    rows = FreshRows(DIM)
    a, b = _mat(100, 1), _mat(90, 2)
    slots = np.concatenate([rows.add(a), rows.add(b)])
    every = np.vstack([a, b])
    assert slots.tolist() == list(range(190)) and rows.used == 190
    pick = np.array([3, 63, 64, 65, 127, 128, 189])
    assert np.array_equal(rows.rows(pick), every[pick])
    vec = _mat(1, 3)[0]
    for asked in (np.arange(40, 150), pick, np.arange(0, 190, 2)):  # a run, a gather, half a span
        assert np.allclose(rows.dot(asked, vec), every[asked] @ vec, atol=1e-5)


def test_a_page_whose_rows_are_all_dropped_is_freed_but_not_the_one_being_filled() -> None:
    rows = FreshRows(DIM)
    rows.add(_mat(150, 4))  # pages 0 and 1 full, page 2 partly
    rows.drop(np.arange(0, 64))
    assert rows._pages[0] is None and rows._pages[1] is not None
    rows.drop(np.arange(64, 150))
    assert rows._pages[1] is None and rows._pages[2] is not None  # slots 128-191 are still being handed out
    more = rows.add(_mat(10, 5))
    assert more.tolist() == list(range(150, 160))
    assert np.array_equal(rows.rows(more), _mat(10, 5))
    vec = _mat(1, 6)[0]
    assert np.allclose(rows.dot(more, vec), _mat(10, 5) @ vec, atol=1e-5)


def test_many_rows_waiting_are_scored_through_their_sign_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signs, "SHORTLIST_FROM", 100)
    rows = FreshRows(DIM)
    first = rows.add(_mat(120, 7))
    rows.drop(first[:64])  # page 0 freed: its codes are never asked for
    held = first[64:]
    vec = _mat(1, 8)[0]
    exact = _mat(120, 7)[64:] @ vec
    got = rows.dot(np.concatenate([held, rows.add(_mat(60, 9))]), vec)  # codes made, then kept up as rows come
    assert rows.signs is not None and rows.signs.shape[1] >= 180
    top = np.argsort(-exact)[:5]
    assert np.allclose(got[top], exact[top], atol=1e-5)  # the best are in the shortlist, scored exactly
