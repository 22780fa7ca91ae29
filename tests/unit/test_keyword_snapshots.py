"""The keyword index inside an index snapshot: kept as of the snapshot's rows, only live postings
written, the largest arrays mapped at load (and written to only in this process), and the layouts
written before still loaded."""

from __future__ import annotations

import os
import zlib

import msgspec
import numpy as np

from skald.store import packed
from skald.store.index import Query, VectorIndex
from tests.unit.test_index_memory import DIM, _rows


def _keyword_answers(idx: VectorIndex, words: list[str]) -> list[list[tuple[str, float]]]:
    return [[(h.row.uri, round(h.score, 5)) for h in idx.keyword_search(w, Query(account="a"), 5)] for w in words]


def test_a_snapshot_keeps_the_keyword_index_as_of_its_rows(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Loaded, not rebuilt; rows written while the snapshot was being saved (after its rows were
    taken) are keyword-indexed as the snapshot's rows say, not as the later writes left them."""
    from skald.store.index import snapshot as snapshot_mod

    data = _rows(1200, seed=8)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.delete("a", data[3][0].uri, 2)
    words = [f"word{i}" for i in range(0, 1200, 7)] + ["common", "body", "later"]
    at_freeze = _keyword_answers(idx, words)
    real_freeze = snapshot_mod.IndexSnapshot._freeze

    def freeze_then_write(self, *a):  # type: ignore[no-untyped-def]
        got = real_freeze(self, *a)
        # After the rows are taken, before the keyword index is written: a rewrite, a removal and
        # a new row into the label the removal freed.
        self.upsert_many([(msgspec.structs.replace(data[10][0], text="Section 10\nlater words"), data[10][1])])
        self.delete("a", data[20][0].uri, 2)
        self.upsert_many([(msgspec.structs.replace(data[20][0], uri="viking://resources/new.md#x",
                                                   text="New\nlater again"), data[20][1])])
        self.upsert_many([(msgspec.structs.replace(data[30][0], uri="viking://resources/newer.md#y",
                                                   text="Newer\nlater still"), data[30][1])])  # a label past them
        return got

    monkeypatch.setattr(snapshot_mod.IndexSnapshot, "_freeze", freeze_then_write)
    idx.save(tmp_path / "snap")
    add: list[int] = []
    from skald.store import bm25

    real_add = bm25.KeywordIndex.add
    monkeypatch.setattr(bm25.KeywordIndex, "add", lambda self, label, *a, **k: (add.append(label),
                                                                                 real_add(self, label, *a, **k))[1])
    back = VectorIndex.load(tmp_path / "snap", DIM, "m")
    assert back is not None
    assert len(add) <= 3  # only the labels written after the rows were taken are indexed again
    assert _keyword_answers(back, words) == at_freeze


def test_keyword_postings_are_saved_without_stale_entries_and_an_older_snapshot_still_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(600, seed=9)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.upsert_many([(msgspec.structs.replace(r, text=r.text + " rewritten"), v) for r, v in data[:200]])
    idx.delete("a", data[300][0].uri, 2)
    words = [f"word{i}" for i in range(0, 600, 11)] + ["rewritten", "common", "body"]
    want = _keyword_answers(idx, words)
    held = sum(p.n for p in idx.keywords._post)
    snap = tmp_path / "snap"
    idx.save(snap)
    mapped = packed.map_arrays(snap / "keywords.mapped")
    assert set(mapped) == {"post_labels", "terms_data"}
    arrays = {**packed.read_arrays(snap / "keywords.arrays"), **{k: np.array(v) for k, v in mapped.items()}}
    del mapped
    assert "post_gens" not in arrays and arrays["post_tfs"].dtype == np.uint8 and arrays["gen"].dtype == np.uint16
    saved = int(arrays["post_labels"].size)
    assert saved < held  # the rewritten and removed rows' old postings are not written
    back = VectorIndex.load(snap, DIM, "m")
    assert back is not None
    assert _keyword_answers(back, words) == want
    # The layout written before the largest arrays were mapped: every one compressed.
    packed.write_arrays(snap / "keywords.arrays", arrays)
    assert _keyword_answers(_with_older_files(snap, "keywords.mapped", "keywords.arrays"), words) == want
    # The layout written before that: uncompressed, every posting with its generation (uint32, past
    # 65,535 here), retired ones too (one added: a row that no longer holds "rewritten"),
    # frequencies as float32.
    tid = msgspec.msgpack.decode((snap / "keywords.msgpack").read_bytes())["terms"].index("rewritten")
    at = int(arrays["post_off"][tid + 1])
    gen = arrays["gen"].astype(np.uint32) + 3 * 65_536
    arrays["frozen"] = arrays["frozen"].astype(np.uint32) + 3 * 65_536
    arrays["post_labels"] = np.insert(arrays["post_labels"], at, 450)
    arrays["post_tfs"] = np.insert(arrays["post_tfs"], at, 1).astype(np.float32)
    arrays["post_gens"] = gen[arrays["post_labels"]]
    arrays["post_gens"][at] -= 1
    arrays["post_off"][tid + 1 :] += 1
    arrays["post_live"] = np.diff(arrays["post_off"])
    arrays["post_live"][tid] -= 1
    arrays["gen"] = gen
    np.savez(snap / "keywords.npz", allow_pickle=False, **arrays)
    assert _keyword_answers(_with_older_files(snap, "keywords.arrays", "keywords.npz"), words) == want


def _with_older_files(snap, gone: str, written: str) -> VectorIndex:  # type: ignore[no-untyped-def]
    """The snapshot loaded with `gone` removed and `written` (just written) in its checksums."""
    meta = msgspec.json.decode((snap / "meta.json").read_bytes())
    os.remove(snap / gone)
    meta["crc32"].pop(gone)
    meta["crc32"][written] = zlib.crc32((snap / written).read_bytes())
    (snap / "meta.json").write_bytes(msgspec.json.encode(meta))
    idx = VectorIndex.load(snap, DIM, "m")
    assert idx is not None
    return idx


def test_mapped_arrays_round_trip_and_a_write_stays_in_the_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    arrays = {"a": np.arange(5000, dtype=np.int32), "b": np.zeros((0,), dtype=np.uint16),
              "c": np.arange(12, dtype=np.float32).reshape(3, 4), "d": np.array([7], dtype=np.int64)}
    path = tmp_path / "x.mapped"
    packed.write_mapped(path, arrays)
    before = path.read_bytes()
    got = packed.map_arrays(path)
    assert set(got) == set(arrays)
    for name, a in arrays.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape and np.array_equal(got[name], a)
        assert got[name].ctypes.data % 64 == 0 or not a.size
    got["a"][10:20] = -1  # copy-on-write: this process's pages, never the file
    assert path.read_bytes() == before
    assert np.array_equal(packed.map_arrays(path)["a"], arrays["a"])


def test_an_index_loaded_from_mapped_arrays_takes_writes_and_its_snapshot_stays_as_saved(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Rewrites and removals after a load compact postings inside the mapped arrays and change
    the rows' term ids: the loaded index answers as one that never left memory, and the snapshot
    it came from still loads (its checksums hold) with the answers it was saved with."""
    data = _rows(800, seed=11)
    words = [f"word{i}" for i in range(0, 800, 7)] + ["rewritten", "common", "body", "again"]
    live = VectorIndex(DIM, "m", text_dir=tmp_path)
    live.upsert_many(data)
    snap = tmp_path / "snap"
    live.save(snap)
    saved = _keyword_answers(live, words)
    back = VectorIndex.load(snap, DIM, "m", text_dir=tmp_path)
    assert back is not None
    for idx in (live, back):
        for r, _ in data[300:]:  # most of "common"'s rows: its postings compact inside the loaded array
            idx.delete("a", r.uri, 2)
        for _ in range(3):
            idx.upsert_many([(msgspec.structs.replace(r, text=r.text + " rewritten again"), v) for r, v in data[:300]])
    assert _keyword_answers(back, words) == _keyword_answers(live, words) != saved
    again = VectorIndex.load(snap, DIM, "m", text_dir=tmp_path)
    assert again is not None
    assert _keyword_answers(again, words) == saved
