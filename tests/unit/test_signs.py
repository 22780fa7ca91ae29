"""The sign-code shortlist of the rows waiting for the graph: codes and distances as defined, the
shortlist scored exactly and every other row behind it, and a search over a large ingest's rows
that finds what an exact one does, filters included."""

from __future__ import annotations

import numpy as np

from skald.store.index import Query, VectorIndex, signs
from tests.unit.test_index_memory import _rows

DIM = 384


def test_codes_and_distances_count_the_dimensions_whose_signs_differ() -> None:
    rng = np.random.default_rng(1)
    for dim in (384, 100):  # a dimension that is not a multiple of 64 is padded with zero bits
        mat = rng.standard_normal((50, dim)).astype(np.float32)
        block = signs.codes(mat)
        assert block.shape == (signs.words(dim), 50) and block.dtype == np.uint64
        q = rng.standard_normal(dim).astype(np.float32)
        got = signs.distances(block, signs.codes(q[None, :])[:, 0])
        want = ((mat > 0) != (q > 0)).sum(axis=1)
        assert got.tolist() == want.tolist()


def test_the_shortlist_is_scored_exactly_and_every_other_row_ranks_behind_it() -> None:
    rng = np.random.default_rng(2)
    mat = rng.standard_normal((10_000, DIM)).astype(np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    vec = mat[7] + 0.1 * rng.standard_normal(DIM).astype(np.float32)
    asked: list[int] = []

    def exact(pos: np.ndarray) -> np.ndarray:
        asked.append(pos.size)
        return mat[pos] @ vec

    out = signs.scored(signs.codes(mat), vec, DIM, exact)
    assert asked == [signs.shortlist_size(10_000)]  # one product, over the shortlist only
    inside = np.isclose(out, mat @ vec, atol=1e-5)
    assert inside.sum() == signs.shortlist_size(10_000)
    assert out[~inside].max() < out[inside].min()  # behind every member, whatever its cosine
    assert inside[7] and int(np.argmax(out)) == 7


def test_a_search_over_a_large_ingest_waiting_for_the_graph_finds_what_an_exact_one_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    n = signs.SHORTLIST_FROM + 4_000
    data = _rows(n, seed=3, docs=40, topics=40, spread=0.6, shift=2.0)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data, defer_graph=True)
    assert idx.pending_graph == n
    mat = np.stack([v for _, v in data])
    rng = np.random.default_rng(4)
    found = 0.0
    for i in range(30):
        vec = mat[i] + 0.05 * rng.standard_normal(DIM).astype(np.float32)
        vec /= np.linalg.norm(vec)
        hits, trace = idx.search(vec, Query(account="a"), 10)
        assert trace.engine == "exact" and len(hits) == 10
        truth = {data[j][0].uri for j in np.argsort(-(mat @ vec))[:10].tolist()}
        found += len(truth & {h.row.uri for h in hits}) / 10
        for h in hits:  # what a caller sees is the cosine itself
            assert abs(h.score - float(mat[int(h.row.uri.rpartition("#s")[2])] @ vec)) < 1e-5
    # The shortlist was taken, not a product over every row.
    assert idx._qv.fresh is not None and idx._qv.fresh.signs is not None
    assert found / 30 >= 0.98

    # A predicate only rows far from the query pass: the shortlist holds none of them, the
    # search still answers from them, with their exact scores.
    far = {data[j][0].uri for j in range(1, n, 40)}  # the rows around topic 1
    vec = mat[0:n:40].mean(axis=0)  # topic 0's centre
    vec /= np.linalg.norm(vec)
    hits, _ = idx.search(vec, Query(account="a", predicate=lambda row: row.uri in far), 5)
    assert len(hits) == 5 and all(h.row.uri in far for h in hits)
    for h in hits:
        assert abs(h.score - float(mat[int(h.row.uri.rpartition("#s")[2])] @ vec)) < 1e-5

    # The graph takes them in: the codes go with the float32 copies.
    while idx.build_graph(8_192) > 0:
        pass
    assert idx._qv.fresh is None


def test_products_over_every_row_are_right_wherever_the_fresh_rows_lie(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Rows 0-2,999 re-written and waiting (fresh), rows 3,000-5,999 in the graph (int8): the int8
    # runs lie after the fresh ones, and every product must still be the row's own.
    data = _rows(6_000, seed=8)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.upsert_many(data[:3_000], defer_graph=True)
    mat = np.stack([v for _, v in data])
    vec = mat[4_500]
    got = idx._qv.dot_all(6_000, vec)
    assert np.abs(got - mat @ vec).max() < 0.01  # int8 moves a cosine by about 0.002 at most
    hits, _ = idx._exact(vec, Query(account="a"), 5, 6_000)
    assert hits[0].row.uri == data[4_500][0].uri
