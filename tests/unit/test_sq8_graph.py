"""The vector graph over 8-bit codes (faiss, `vector_graph = "sq8"`): as good as hnswlib's once its
candidates are scored again, deleted rows never answer, it is built again when its dead elements
or its codes' sample call for it, it survives a snapshot, and searches go on while it grows."""

from __future__ import annotations

import threading
from unittest import mock

import numpy as np
import pytest

from skald.runtime.host.config import Config, ConfigError
from skald.store.index import Query, VectorIndex, sqgraph
from tests.unit.test_index_graph import rows


def built(kind: str, data: list, defer: bool = True) -> VectorIndex:  # type: ignore[type-arg]
    """The same graph every run: one thread, and pieces that grow fourfold whatever they took
    (sized on their rate, they made graphs whose recall@10 at 20,000 rows ran 0.945-0.968: faiss
    orders a piece's rows by level before inserting them)."""
    idx = VectorIndex(64, "m", graph=kind)
    for i in range(0, len(data), 2000):
        idx.upsert_many(data[i : i + 2000], defer_graph=defer)
    with mock.patch.object(sqgraph, "BULK_S", 1e9):
        while idx.build_graph(4096, threads=1) > 0:
            pass
    return idx


def recall(idx: VectorIndex, data: list, probes: np.ndarray) -> float:  # type: ignore[type-arg]
    q, found = Query(account="a"), 0
    vecs = np.stack([v for _, v in data])
    for p in probes:
        truth = {data[i][0].uri for i in np.argsort(-(vecs @ p))[:10].tolist()}
        hits, _ = idx.search(p, q, 10)
        found += len(truth & {h.row.uri for h in hits})
    return found / (10 * len(probes))


def probes(data: list, n: int = 100, seed: int = 7) -> np.ndarray:  # type: ignore[type-arg]
    rng = np.random.default_rng(seed)
    out = np.stack([data[int(i)][1] for i in rng.integers(0, len(data), n)]) + 0.1 * rng.standard_normal((n, 64))
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def test_its_answers_are_as_good_as_hnswlibs_and_scored_exactly() -> None:
    data = rows(20_000, seed=11)
    p = probes(data)
    ours, theirs = built("sq8", data), built("hnsw", data)
    assert ours.search(p[0], Query(account="a"), 10)[1].engine == "sq8"
    assert recall(ours, data, p) >= recall(theirs, data, p) - 0.01
    hits, _ = ours.search(p[1], Query(account="a"), 10)
    by_uri = {r.uri: v for r, v in data}
    assert [h.score for h in hits] == pytest.approx([float(by_uri[h.row.uri] @ p[1]) for h in hits], abs=1e-5)
    assert ours._graph.get_current_count() == 20_000


def test_deleted_and_rewritten_rows_never_answer_and_the_graph_is_built_again() -> None:
    data = rows(24_000, seed=12)
    idx = built("sq8", data)
    q = Query(account="a")
    for row, _ in data[:12_000]:
        assert idx.delete("a", row.uri, 2)
    moved, new_vec = data[15_000][0], data[100][1]
    idx.upsert_many([(moved, new_vec)])
    assert all(h.row.uri != data[5][0].uri for h in idx.search(data[5][1], q, 10)[0])
    assert idx.search(new_vec, q, 1)[0][0].row.uri == moved.uri
    graph = idx._graph
    assert isinstance(graph, sqgraph.SqGraph) and graph.dead == 12_001 and graph.stale()
    idx.build_graph(512)  # a new graph; the live rows wait for it, searched exactly meanwhile
    assert idx._graph is not graph and idx.pending_graph == 12_000 - 512
    assert idx.search(new_vec, q, 1)[0][0].row.uri == moved.uri
    while idx.build_graph(4096) > 0:
        pass
    fresh = idx._graph
    assert isinstance(fresh, sqgraph.SqGraph) and fresh.dead == 0 and fresh.live == 12_000
    hits, trace = idx.search(new_vec, q, 10)
    assert trace.engine == "sq8" and hits[0].row.uri == moved.uri
    assert recall(idx, data[12_000:], probes(data[12_000:])) >= 0.95


def test_the_graphs_codes_serve_as_the_int8_copy() -> None:
    """On the 8-bit graph the index keeps no int8 copy of its own (0.39 GB at a million rows): the
    approximate scores that choose a scope's best rows come from the graph's codes, within a
    hundredth of the cosine, from the old graph for rows waiting for a new one, and exactly from
    the file for a row found in neither."""
    data = rows(20_000, seed=16)
    idx = built("sq8", data)
    assert idx._qv.q.size == 0 and idx._qv.coded is not None
    probe = data[9][1]
    labels = list(range(0, 20_000, 7))
    approx = idx.similarity_labels(probe, labels, "a", exact=False)
    exact = idx.similarity_labels(probe, labels, "a", exact=True)
    assert np.abs(approx - exact).max() < 0.01 and not np.array_equal(approx, exact)
    scoped, trace = idx.search(probe, Query(account="a", prefixes=["viking://resources/t9"]), 5)
    assert trace.engine == "exact" and scoped[0].row.uri == data[9][0].uri
    for row, _ in data[:10_500]:  # half deleted: a new graph, the rows waiting for it
        idx.delete("a", row.uri, 2)
    idx.build_graph(256)
    assert idx._previous_graph is not None and idx.pending_graph == 9_500 - 256
    waiting = np.asarray(sorted(idx._pending), dtype=np.int64)
    found, _ = idx._qv.coded.dot(waiting, probe)
    assert found.all()  # from the graph being replaced
    again = idx.similarity_labels(probe, waiting.tolist(), "a", exact=False)
    assert np.abs(again - idx.similarity_labels(probe, waiting.tolist(), "a")).max() < 0.01
    while idx.build_graph(4096) > 0:
        pass
    assert idx._previous_graph is None
    lost = np.asarray([3], dtype=np.int64)  # deleted: in no graph, read from the file
    assert idx._qv.coded.dot(lost, probe)[0].tolist() == [False]
    assert idx._qv.dot(lost, probe)[0] == pytest.approx(float(data[3][1] @ probe), abs=1e-6)


def test_codes_from_a_few_rows_are_taken_again_from_more() -> None:
    """A graph whose first rows were few (a new account's first notes) is built again once it
    holds four times more rows than its codes' ranges were taken from."""
    data = rows(12_000, seed=13)
    idx = built("sq8", data[:300])
    graph = idx._graph
    assert isinstance(graph, sqgraph.SqGraph) and graph.trained_on == 300
    for i in range(300, 12_000, 1000):
        idx.upsert_many(data[i : i + 1000])
        while idx.build_graph(4096) > 0:
            pass
    final = idx._graph
    assert isinstance(final, sqgraph.SqGraph) and final.trained_on > 4 * 300 and final.live == 12_000
    assert recall(idx, data, probes(data)) >= 0.95


def test_a_snapshot_of_it_reads_back_and_one_of_the_other_kind_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = rows(12_000, seed=14)
    # Vectors as the stream carries them (float16 values): the snapshot's file holds them exactly.
    data = [(r, v.astype(np.float16).astype(np.float32)) for r, v in data]
    idx = built("sq8", data)
    idx.delete("a", data[3][0].uri, 2)
    idx.save(tmp_path / "snap")
    assert (tmp_path / "snap" / sqgraph.FILE).exists() and not (tmp_path / "snap" / "graph.bin").exists()
    # The codes are made again from the vectors on load, but for the deleted row's (kept apart).
    assert np.load(tmp_path / "snap" / sqgraph.DEAD).shape == (1, 64)
    back = VectorIndex.load(tmp_path / "snap", 64, "m", graph="sq8")
    assert back is not None and len(back) == 11_999 and back.content_hash() == idx.content_hash()
    q = Query(account="a")
    for p in probes(data, 20):
        mine, theirs = idx.search(p, q, 10)[0], back.search(p, q, 10)[0]
        assert [h.row.uri for h in mine] == [h.row.uri for h in theirs]
        assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-6)
    assert all(h.row.uri != data[3][0].uri for h in back.search(data[3][1], q, 5)[0])
    assert VectorIndex.load(tmp_path / "snap", 64, "m", graph="hnsw") is None  # rebuilt from the stream
    idx2 = built("hnsw", data[:3000])
    idx2.save(tmp_path / "h")
    assert VectorIndex.load(tmp_path / "h", 64, "m", graph="sq8") is None


@pytest.mark.parametrize("kind", ["hnsw", "sq8"])
def test_searches_go_on_while_the_builder_adds_rows(kind: str) -> None:
    """faiss's graph must not be read while written: searches and inserts take turns. Searches
    from another thread throughout a build all answer, and right but for the graph's own rare
    misses (a walk that does not reach a row: one in a few thousand either way). hnswlib's walk
    beside an insert could also raise for want of rows, once in a few hundred searches."""
    data = rows(16_000, seed=15)
    idx = built(kind, data[:10_000])
    idx.upsert_many(data[10_000:], defer_graph=True)
    errors: list[BaseException] = []
    done = threading.Event()
    answered, wrong = 0, 0

    def search() -> None:
        nonlocal answered, wrong
        q = Query(account="a")
        try:
            while not done.is_set():
                i = 10_000 + answered * 37 % 6_000
                hits, _ = idx.search(data[i][1], q, 5)
                wrong += hits[0].row.uri != data[i][0].uri
                answered += 1
        except BaseException as e:  # noqa: BLE001 - carried to the test's thread
            errors.append(e)

    t = threading.Thread(target=search)
    t.start()
    while idx.build_graph(2048, threads=2) > 0:
        pass
    done.set()
    t.join(60)
    assert not errors and answered > 0 and wrong <= answered // 100 and idx.pending_graph == 0


def test_the_setting_takes_the_two_kinds_only() -> None:
    assert Config.from_env({"SKALD_VECTOR_GRAPH": "sq8"}).vector_graph == "sq8"
    with pytest.raises(ConfigError, match="SKALD_VECTOR_GRAPH"):
        Config.from_env({"SKALD_VECTOR_GRAPH": "faiss-ivf"})
    with pytest.raises(ValueError, match="vector graph"):
        VectorIndex(64, "m", graph="annoy")
