"""The float32 vectors on disk once: after a snapshot, the rows not written since are read from
its graph file and their bytes in the index's own float32 file are given back; what a search
returns (exact cosines) does not change, through rewrites, a snapshot taken while rows are
written, a load, and a graph file that does not read back as it should."""

from __future__ import annotations

import os
import shutil

import msgspec
import numpy as np
import pytest

from skald.store.index import Query, VectorIndex, qvectors
from skald.store.index import snapshot as snapshot_mod

from .test_index_memory import DIM, _rows


def _allocated(idx: VectorIndex) -> int:
    """Bytes the file system holds for the index's float32 file."""
    return os.fstat(idx._qv._file.fileno()).st_blocks * 512


def _scores(idx: VectorIndex, probes: list[np.ndarray]) -> list[list[tuple[str, float]]]:
    return [[(h.row.uri, round(h.score, 6)) for h in idx.search(v, Query(account="a"), 5)[0]] for v in probes]


@pytest.mark.parametrize("halves", [False, True], ids=["float32", "float16"])
def test_rows_not_written_since_a_snapshot_are_read_from_its_graph(tmp_path, monkeypatch, halves) -> None:  # type: ignore[no-untyped-def]
    """Vectors as the index stream carries them (float16 values) make a split graph, whose float16
    file is the base; others a whole graph, read in place."""
    data = _rows(1500, seed=11)
    if halves:
        data = [(r, v.astype(np.float16).astype(np.float32)) for r, v in data]
    probes = [v for _, v in data[::97]]
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    before, held = _scores(idx, probes), _allocated(idx)
    assert held >= 1500 * DIM * 4
    # Rows written after the snapshot's rows are taken and before its graph becomes the base.
    real_freeze = snapshot_mod.IndexSnapshot._freeze
    moved = data[7][1][::-1].copy()

    def freeze_then_write(self, *a):  # type: ignore[no-untyped-def]
        got = real_freeze(self, *a)
        self.upsert_many([(data[7][0], moved)])
        return got

    monkeypatch.setattr(snapshot_mod.IndexSnapshot, "_freeze", freeze_then_write)
    idx.save(tmp_path / "snap")
    monkeypatch.undo()
    names = {p.name for p in (tmp_path / "snap").iterdir()}
    if halves:  # the graph's links, and its vectors in 2 bytes a component
        assert {"graph.links", "vectors.f16"} <= names and "graph.bin" not in names
        assert (tmp_path / "snap" / "vectors.f16").stat().st_size == 1500 * DIM * 2
    else:
        assert "graph.bin" in names and "graph.links" not in names
    assert _allocated(idx) < held / 20  # the vectors' bytes given back: the graph file holds them
    assert int((idx._qv.base_pos >= 0).sum()) == 1499  # every row but the one written meanwhile
    row7 = idx.search(moved, Query(account="a"), 1)[0][0]
    assert row7.row.uri == data[7][0].uri and abs(row7.score - float(moved @ moved)) < 1e-5
    # Rewritten after the snapshot: read from the file again, the new vector's cosine returned.
    fresh = [(r, -v) for r, v in data[:40]]
    idx.upsert_many(fresh)
    hit = idx.search(-data[3][1], Query(account="a"), 1)[0][0]
    assert hit.row.uri == data[3][0].uri and abs(hit.score - 1.0) < 1e-5
    idx.upsert_many(data[:40])
    idx.upsert_many([(data[7][0], data[7][1])])
    assert _scores(idx, probes) == before
    # A second snapshot: the base moves to its graph, the first snapshot's can go.
    idx.save(tmp_path / "snap2")
    shutil.rmtree(tmp_path / "snap")
    assert _scores(idx, probes) == before
    # Loaded: nothing written to the float32 file, every row read from the snapshot's graph.
    back = VectorIndex.load(tmp_path / "snap2", DIM, "m", text_dir=tmp_path)
    assert back is not None
    assert _allocated(back) == 0 and int((back._qv.base_pos >= 0).sum()) == 1500
    assert back._qv._lay is not None and back._qv._lay.dtype == ("<f2" if halves else "<f4")
    assert _scores(back, probes) == before


def test_a_graph_file_that_disagrees_is_not_taken_as_the_base(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(400, seed=12)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.save(tmp_path / "snap")
    bad = tmp_path / "bad.bin"
    raw = bytearray((tmp_path / "snap" / "graph.bin").read_bytes())
    lay = snapshot_mod.graphfile.layout(tmp_path / "snap" / "graph.bin", DIM)
    for e in range(lay.elements):  # every vector's first component changed
        at = lay.start + e * lay.per + lay.data_at
        raw[at : at + 4] = np.float32(0.5).tobytes()
    bad.write_bytes(bytes(raw))
    qv, good = idx._qv, tmp_path / "snap" / "graph.bin"
    assert not qv.rebase(bad, qv.mark(), snapshot_mod.graphfile.positions(bad, DIM, 400))
    assert qv.rebase(good, qv.mark(), snapshot_mod.graphfile.positions(good, DIM, 400))
    probe = data[5][1]
    hit = idx.search(probe, Query(account="a"), 1)[0][0]
    assert abs(hit.score - 1.0) < 1e-5
    assert msgspec.json.decode((tmp_path / "snap" / "meta.json").read_bytes())["rows"] == 400


def test_a_split_graphs_vectors_that_disagree_are_not_taken_as_the_base(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = [(r, v.astype(np.float16).astype(np.float32)) for r, v in _rows(400, seed=13)]
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.save(tmp_path / "snap")
    links, good = tmp_path / "snap" / "graph.links", tmp_path / "snap" / "vectors.f16"
    halves = np.fromfile(good, dtype="<f2").reshape(-1, DIM)
    bad = tmp_path / "vectors.f16"  # the name a split graph's vectors have, in another directory
    (halves * np.float16(0.5)).tofile(bad)
    pos = snapshot_mod.graphfile.positions(links, DIM, 400)
    qv = idx._qv
    assert not qv.rebase(bad, qv.mark(), pos)
    assert qv.rebase(good, qv.mark(), pos)
    hit = idx.search(data[9][1], Query(account="a"), 1)[0][0]
    assert hit.row.uri == data[9][0].uri and abs(hit.score - 1.0) < 1e-3


@pytest.mark.parametrize("halves", [False, True], ids=["float32", "float16"])
def test_a_few_rows_read_one_at_a_time_are_the_rows_read_in_runs(tmp_path, monkeypatch, halves) -> None:  # type: ignore[no-untyped-def]
    """A search's few rows are read one `pread` each in the order asked, a snapshot's many in runs
    of neighbours: the same vectors either way, from the base, the file, or both at once."""
    data = _rows(300, seed=14)
    if halves:
        data = [(r, v.astype(np.float16).astype(np.float32)) for r, v in data]
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.save(tmp_path / "snap")
    idx.upsert_many([(r, -v) for r, v in data[100:110]])  # written since: read from the file
    qv = idx._qv
    want = np.stack([v for _, v in data])
    want[100:110] *= -1
    # out of order, a label twice, neighbours, rows from the base and from the file together
    labels = np.asarray([299, 3, 4, 5, 104, 3, 250, 0, 109, 17], dtype=np.int64)
    for few in (qvectors.FEW_ROWS, 0):  # 0: every read goes through the runs
        monkeypatch.setattr(qvectors, "FEW_ROWS", few)
        got = qv.read(labels)
        assert got.dtype == np.float32 and np.array_equal(got, want[labels])
        assert np.array_equal(qv.read(labels[:4]), want[labels[:4]])  # base only
        assert np.array_equal(qv.read(labels[4:5]), want[labels[4:5]])  # file only
    assert qv._lay is not None and qv._lay.dtype == ("<f2" if halves else "<f4")
