"""Bounded memory per row: the index keeps an int8 copy of each vector in memory and leaf texts in
a file, yet what it returns is what it was given (exact cosines, whole texts), across a snapshot,
from an older snapshot, and after its text file is compacted."""

from __future__ import annotations

import os

import msgspec
import numpy as np
import pytest

from skald.messages.index import IndexRow
from skald.store import packed
from skald.store.index import Query, VectorIndex
from skald.store.index import rows as rows_mod
from skald.store.index import texts as texts_mod

DIM = 384


def _rows(n: int, seed: int = 0, docs: int = 50, topics: int = 10, spread: float = 0.4,
          shift: float = 0.0) -> list[tuple[IndexRow, np.ndarray]]:
    """Section rows around `topics` centres (`shift` added to every centre: a direction all rows
    share, as an embedder's vectors do)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, DIM)).astype(np.float32) + shift
    out = []
    for i in range(n):
        v = centres[i % topics] + spread * rng.standard_normal(DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        doc = f"viking://resources/d{i % docs}.md"
        out.append((IndexRow(account="a", uri=f"{doc}#s{i}", level=2, parent_uri=doc, context_type="resource",
                             kind="section", abstract=f"section {i}", text=f"Section {i}\nword{i} common body {i}"),
                    v.astype(np.float32)))
    return out


def test_returned_scores_are_exact_cosines_and_the_order_is_float32s(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(3000)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    assert idx._qv.q.dtype == np.int8  # the copy in memory is a quarter of float32's
    mat = np.stack([v for _, v in data])
    rng = np.random.default_rng(9)
    for _ in range(20):
        qv = mat[rng.integers(0, len(data))] + 0.2 * rng.standard_normal(DIM).astype(np.float32)
        qv /= np.linalg.norm(qv)
        hits, trace = idx.search(qv, Query(account="a"), 10)
        assert trace.engine == "exact"
        truth = np.argsort(-(mat @ qv))[:10]
        assert [h.row.uri for h in hits] == [data[i][0].uri for i in truth]
        for h, i in zip(hits, truth, strict=True):
            assert h.score == pytest.approx(float(mat[i] @ qv), abs=1e-6)
    kids = idx.search_children_many(mat[7], "a", ["viking://resources/d7.md"], Query(account="a"), 5)[0]
    assert kids[0].row.uri == data[7][0].uri and kids[0].score == pytest.approx(1.0, abs=1e-6)


def test_hybrid_reads_exact_vectors_only_for_keyword_rows_near_the_cut(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The rows only the keywords found are chosen by their int8 cosines and the few near the
    cut scored again exactly: the same hits, in the same order, with the same scores, as when
    every one of them is read from the float32 file, for fewer rows read."""
    from skald.actors.retriever import scoring

    rng = np.random.default_rng(4)
    words = [f"w{i}" for i in range(60)]
    data = [(msgspec.structs.replace(r, text=" ".join(rng.choice(words, size=6))), v) for r, v in _rows(3000)]
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    read: list[int] = []
    sim = idx.similarity_labels

    def counted(vec, labels, account, exact=True):  # type: ignore[no-untyped-def]
        if exact:
            read.append(len(labels))
        return sim(vec, labels, account, exact)

    def every_exact(vec, labels, account, exact=True):  # type: ignore[no-untyped-def]
        return sim(vec, labels, account, True)

    mat = np.stack([v for _, v in data])
    q = Query(account="a")
    fewer = 0
    for t in range(20):
        qv = mat[rng.integers(0, len(data))] + 0.3 * rng.standard_normal(DIM).astype(np.float32)
        qv /= np.linalg.norm(qv)
        text = " ".join(rng.choice(words, size=3))
        idx.similarity_labels = every_exact  # type: ignore[method-assign]
        want = scoring.hybrid(idx, qv, text, q, 10)
        idx.similarity_labels = counted  # type: ignore[method-assign]
        read.clear()
        got = scoring.hybrid(idx, qv, text, q, 10)
        assert [h.label for h in got] == [h.label for h in want], t
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)
        assert [h.gate for h in got] == pytest.approx([h.gate for h in want], abs=1e-6)
        for h in got:  # what is returned is the cosine itself plus the keyword lift
            assert h.score >= float(mat[h.label] @ qv) - 1e-6
        fewer += sum(read) < scoring.KEYWORD_DEPTH
    assert fewer == 20  # never every keyword hit read exactly


def test_a_leaf_text_leaves_the_row_and_is_read_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(200)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    row, vec = data[42]
    hit = idx.search(vec, Query(account="a"), 1)[0][0]
    assert hit.row.text == ""  # not held on the row
    assert idx.leaf_text(hit.label) == row.text
    assert idx.get("a", row.uri, 2).text == row.text  # type: ignore[union-attr]
    assert idx.leaf_texts("a", [row.uri, "viking://resources/none.md#x"]) == [row.text, ""]
    assert [h.row.uri for h in idx.keyword_search("word42", Query(account="a"), 3)] == [row.uri]
    # Rewritten and removed: the new text served, the removed one gone.
    idx.upsert_many([(msgspec.structs.replace(row, text="Section 42\nrewritten words"), vec)])
    assert idx.leaf_texts("a", [row.uri]) == ["Section 42\nrewritten words"]
    assert idx.keyword_search("word42", Query(account="a"), 3) == []
    assert idx.delete("a", row.uri, 2)
    assert idx.leaf_texts("a", [row.uri]) == [""]


def _same(a: VectorIndex, b: VectorIndex, data: list[tuple[IndexRow, np.ndarray]]) -> None:
    for row, vec in data[::37]:
        ha, hb = a.search(vec, Query(account="a"), 5)[0], b.search(vec, Query(account="a"), 5)[0]
        assert [(h.row.uri, round(h.score, 6)) for h in ha] == [(h.row.uri, round(h.score, 6)) for h in hb]
        assert b.get("a", row.uri, 2).text == row.text  # type: ignore[union-attr]
        word = row.text.split()[2]
        assert [h.row.uri for h in b.keyword_search(word, Query(account="a"), 1)] == [row.uri]


def test_a_snapshot_keeps_vectors_and_texts_and_an_older_one_still_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(1500, seed=3)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    snap = tmp_path / "snap"
    idx.save(snap)
    assert not (snap / "vectors.npy").exists()  # the vectors are the graph's own
    back = VectorIndex.load(snap, DIM, "m")
    assert back is not None
    _same(idx, back, data)
    # Read from the graph row by row when what the file gives disagrees with the graph.
    from skald.store.index import graphfile

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graphfile, "verify", lambda *a: False)
        slow = VectorIndex.load(snap, DIM, "m")
    assert slow is not None
    _same(idx, slow, data)
    # A snapshot written before leaf texts left the rows: rows carry their text, no texts files.
    rows = msgspec.msgpack.decode(packed.read_bytes(snap / "rows.zst"), type=list[IndexRow | None])
    by_uri = {r.uri: r.text for r, _ in data}
    old = [None if r is None else msgspec.structs.replace(r, text=by_uri[r.uri]) for r in rows]
    (snap / "rows.msgpack").write_bytes(msgspec.msgpack.encode(old))  # uncompressed, as then
    meta = msgspec.json.decode((snap / "meta.json").read_bytes())
    for name in ("texts.bin", "texts.npy", "rows.zst"):
        os.remove(snap / name)
        meta["crc32"].pop(name)
    meta["crc32"]["rows.msgpack"] = __import__("zlib").crc32((snap / "rows.msgpack").read_bytes())
    vecs = np.zeros((len(rows), DIM), dtype=np.float32)  # and its vectors beside the graph
    for label, r in enumerate(rows):
        if r is not None:
            vecs[label] = next(v for rr, v in data if rr.uri == r.uri)
    np.save(snap / "vectors.npy", vecs)
    meta["crc32"]["vectors.npy"] = __import__("zlib").crc32((snap / "vectors.npy").read_bytes())
    (snap / "meta.json").write_bytes(msgspec.json.encode(meta))
    older = VectorIndex.load(snap, DIM, "m")
    assert older is not None
    _same(idx, older, data)


def test_the_text_file_is_compacted_when_its_garbage_outgrows_it(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(texts_mod, "COMPACT_FROM", 0)
    data = _rows(300, seed=4)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    for _ in range(3):  # every text written again: three times the live bytes are garbage
        idx.upsert_many([(msgspec.structs.replace(r, text=r.text + " again"), v) for r, v in data])
    heap = idx._texts
    before = os.fstat(heap._f.fileno()).st_size
    assert heap.garbage() > heap.live_bytes
    idx.save(tmp_path / "snap")  # a snapshot's end compacts
    assert os.fstat(heap._f.fileno()).st_size < before / 3
    assert heap.garbage() == 0
    assert idx.leaf_texts("a", [r.uri for r, _ in data]) == [r.text + " again" for r, _ in data]


def test_a_snapshot_links_the_live_text_file_and_reads_only_what_it_covered(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    data = _rows(400, seed=5)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    snap = tmp_path / "snap"
    idx.save(snap)
    live = os.fstat(idx._texts._f.fileno())
    linked = os.stat(snap / "texts.bin")
    assert (linked.st_dev, linked.st_ino) == (live.st_dev, live.st_ino)  # the texts on disk once
    # Written after the snapshot: the live file (the snapshot's too) grows, then is compacted away.
    monkeypatch.setattr(texts_mod, "COMPACT_FROM", 0)
    for _ in range(2):
        idx.upsert_many([(msgspec.structs.replace(r, text=r.text + " later"), v) for r, v in data])
    assert os.stat(snap / "texts.bin").st_size > msgspec.json.decode((snap / "meta.json").read_bytes())["texts_bytes"]
    idx.save(tmp_path / "other")  # compacts: the live heap is a new file, the snapshot keeps the old
    assert os.fstat(idx._texts._f.fileno()).st_ino != linked.st_ino
    back = VectorIndex.load(snap, DIM, "m")
    assert back is not None
    assert back.leaf_texts("a", [r.uri for r, _ in data]) == [r.text for r, _ in data]  # as of the snapshot
    # A byte changed inside what the snapshot covers is refused; growth past it was not.
    raw = bytearray((snap / "texts.bin").read_bytes())
    raw[10] ^= 0xFF
    (snap / "texts.bin").write_bytes(bytes(raw))
    assert VectorIndex.load(snap, DIM, "m") is None
    # Where no link can be made, the snapshot copies the texts, and reads back the same.
    monkeypatch.setattr(texts_mod, "_link", lambda f, path: False)
    copied = tmp_path / "copied"
    idx.save(copied)
    assert os.stat(copied / "texts.bin").st_ino != os.fstat(idx._texts._f.fileno()).st_ino
    again = VectorIndex.load(copied, DIM, "m")
    assert again is not None
    assert again.leaf_texts("a", [r.uri for r, _ in data]) == [r.text + " later" for r, _ in data]


def test_float32_copies_of_waiting_rows_go_once_the_graph_holds_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(12000, seed=5)  # the graph holding more than a brute-force scope's rows answers for them
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data[:9000])
    idx.upsert_many(data[9000:], defer_graph=True)
    assert idx.pending_graph == 3000 and idx._qv.live == 3000
    row, vec = data[10000]
    hits, trace = idx.search(vec, Query(account="a"), 3)
    assert trace.engine == "hnsw+pending" and hits[0].row.uri == row.uri
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)
    while idx.build_graph(1000) > 0:
        pass
    assert idx._qv.fresh is None and idx._qv.live == 0
    hits, trace = idx.search(vec, Query(account="a"), 3)
    assert trace.engine == "hnsw" and hits[0].row.uri == row.uri


def test_the_children_vector_cache_is_bounded(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(rows_mod, "CHILD_VECTORS_CACHED", 100)
    data = _rows(1000, seed=6, docs=40)  # 25 sections a document
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    parents = [f"viking://resources/d{i}.md" for i in range(40)]
    for p in parents:
        got = idx.search_children_many(data[0][1], "a", [p], Query(account="a"), 3)[0]
        assert len(got) == 3 and all(h.row.parent_uri == p for h in got)
        assert idx._children_mat_rows <= 100
    assert 0 < len(idx._children_mat) <= 4


def test_row_terms_keep_every_rows_ids_through_rewrites_and_compaction() -> None:
    from skald.store.row_terms import RowTerms

    rng = np.random.default_rng(7)
    terms, truth = RowTerms(capacity=4), {}
    for step in range(40_000):
        label = int(rng.integers(0, 3000))
        if rng.random() < 0.2:
            got = terms.pop(label)
            assert (got is None) == (label not in truth)
            if got is not None:
                assert got.tolist() == truth.pop(label)
        else:
            ids = sorted(set(rng.integers(0, 5000, int(rng.integers(0, 60))).tolist()))
            terms.set(label, np.asarray(ids, dtype=np.int32))
            truth[label] = ids
        if step % 5000 == 0:
            assert all(terms.get(lab).tolist() == ids for lab, ids in truth.items())
            asked = [*rng.integers(-2, 3200, 80).tolist(), *list(truth)[:20]]  # unknown, gone, held
            ids, lens = terms.many(asked)
            assert lens.tolist() == [len(truth.get(lab, [])) for lab in asked]
            assert ids.tolist() == [i for lab in asked for i in truth.get(lab, [])]
    assert len(terms) == len(truth) and terms.live == sum(len(v) for v in truth.values())
    assert terms.end < 3 * max(terms.live, 1 << 16)  # compacted as it went: not 40,000 rows' worth
    assert all(terms.get(lab).tolist() == ids for lab, ids in truth.items())
    assert terms.get(-1).size == 0 and terms.get(10**6).size == 0


def test_stats_count_levels_from_what_writes_keep(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(90, seed=9)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    summaries = [(msgspec.structs.replace(r, uri=r.parent_uri, level=lv, kind="document"), v)
                 for r, v in data[:10] for lv in (0, 1)]
    idx.upsert_many([*data, *summaries])
    idx.delete("a", data[0][0].uri, 2)
    idx.delete("a", summaries[0][0].uri, 0)
    st = idx.stats()
    assert (st["rows"], st["level0"], st["level1"], st["level2"]) == (108, 9, 10, 89)


def test_new_rows_keep_the_scope_order_whichever_way_they_land(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Rows appended after every key, a few inserted among them, and a large batch among them in
    no order all leave the scope order the one a snapshot rebuilds from scratch, and a
    directory's scope holds exactly its rows."""
    data = _rows(400, docs=50)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data[:100])  # d0..d49, in order
    idx.upsert_many(data[300:303])  # a few: one insert each
    idx.upsert_many(list(reversed(data[100:300])))  # a batch among them, in no order
    idx.upsert_many(data[303:])
    idx.delete("a", data[7][0].uri, 2)
    want = sorted((idx._skeys[lab], lab) for lab in idx._labels.values())
    assert list(zip(idx._sorted_keys, idx._sorted_labels, strict=True)) == want
    hits, _ = idx.search(data[12][1], Query(account="a", prefixes=["viking://resources/d12.md"]), 100)
    assert sorted(h.row.uri for h in hits) == sorted(r.uri for r, _ in data if r.parent_uri.endswith("/d12.md"))
