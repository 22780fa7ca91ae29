"""A snapshot saved with `adopt` replaces the index's keyword index with its own (postings mapped
from the snapshot's file), brought up to every write made while the snapshot was saved and taken
up: the index answers as a twin that took the same writes and never left memory."""

from __future__ import annotations

import gc
from pathlib import Path

import msgspec
import pytest

from skald.store import bm25_snapshot
from skald.store.index import Query, VectorIndex, adopt
from skald.store.index import snapshot as snapshot_mod
from tests.unit.test_index_memory import DIM, _rows
from tests.unit.test_keyword_snapshots import _keyword_answers


def _answers(idx: VectorIndex) -> list[list[tuple[str, float]]]:
    """Each word's top rows and BM25 scores, ties by URI: a delete during a save frees its label
    only after it, so the two indexes number their later rows apart (ties go by label)."""
    return [sorted(a, key=lambda hit: (-hit[1], hit[0])) for a in _keyword_answers(idx, WORDS)]

WORDS = [f"word{i}" for i in range(0, 900, 11)] + ["common", "body", "later", "again", "still", "moved"]


def _writes(data: list, step: int) -> list:  # type: ignore[type-arg]
    """A rewrite, a removal, a new row into the label it freed, a row past the others, and a
    rewrite of a row the step before wrote: what an ingest does while a snapshot is saved."""
    a = 10 + step * 7
    return [
        ("put", [(msgspec.structs.replace(data[a][0], text=f"Section {a}\nlater words {step}"), data[a][1])]),
        ("del", data[a + 1][0].uri),
        ("put", [(msgspec.structs.replace(data[a + 1][0], uri=f"viking://resources/new{step}.md#x",
                                          text="New\nlater again"), data[a + 1][1])]),
        ("put", [(msgspec.structs.replace(data[a + 2][0], uri=f"viking://resources/newer{step}.md#y",
                                          text="Newer\nlater still moved"), data[a + 2][1])]),
        ("put", [(msgspec.structs.replace(data[a - 7][0], text=f"Section {a - 7}\nmoved again"), data[a - 7][1])]),
    ]


def _apply(idx: VectorIndex, writes: list) -> None:  # type: ignore[type-arg]
    for kind, what in writes:
        if kind == "put":
            idx.upsert_many(what)
        else:
            idx.delete("a", what, 2)


def test_an_adopted_keyword_index_answers_as_one_that_never_left_memory(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    data = _rows(900, seed=4)
    (tmp_path / "live").mkdir()
    (tmp_path / "twin").mkdir()
    live = VectorIndex(DIM, "m", text_dir=tmp_path / "live")
    twin = VectorIndex(DIM, "m", text_dir=tmp_path / "twin")
    for idx in (live, twin):
        idx.upsert_many(data)
        idx.delete("a", data[3][0].uri, 2)
    real_freeze, real_load = snapshot_mod.IndexSnapshot._freeze, bm25_snapshot.load

    def freeze_then_write(self, *a):  # type: ignore[no-untyped-def]
        got = real_freeze(self, *a)
        if self is live:  # after the rows are taken, before the keyword index is written
            _apply(live, _writes(data, 1))
            _apply(twin, _writes(data, 1))
        return got

    def load_then_write(directory: Path):  # type: ignore[no-untyped-def]
        got = real_load(directory)
        _apply(live, _writes(data, 2))  # after the snapshot's keyword index is read, before the swap
        _apply(twin, _writes(data, 2))
        return got

    monkeypatch.setattr(snapshot_mod.IndexSnapshot, "_freeze", freeze_then_write)
    monkeypatch.setattr(adopt.bm25_snapshot, "load", load_then_write)
    before = live.keywords
    live.save(tmp_path / "snap", adopt=True)
    assert live.keywords is not before and live._kw_log is None
    assert live.keywords._post._off.size > 1  # the snapshot's terms, as ranges of its arrays
    assert not live.keywords._post._labels.flags.owndata  # mapped from the snapshot's file
    assert _answers(live) == _answers(twin)
    # and it goes on as one: more writes, then another snapshot taken up the same way
    for idx in (live, twin):
        _apply(idx, _writes(data, 3))
    assert _answers(live) == _answers(twin)
    live.save(tmp_path / "snap", adopt=True)
    assert _answers(live) == _answers(twin)
    hits = {h.row.uri for h in live.keyword_search("later", Query(account="a"), 20)}
    assert "viking://resources/newer2.md#y" in hits and any(uri.endswith("#s24") for uri in hits)


def test_a_keyword_index_that_cannot_be_read_back_leaves_the_index_as_it_was(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = _rows(300, seed=5)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    answers, before = _keyword_answers(idx, WORDS), idx.keywords

    def unreadable(directory: Path):  # type: ignore[no-untyped-def]
        raise ValueError("keyword postings do not match their terms")

    monkeypatch.setattr(adopt.bm25_snapshot, "load", unreadable)
    idx.save(tmp_path / "snap", adopt=True)
    assert idx.keywords is before and idx._kw_log is None
    assert _keyword_answers(idx, WORDS) == answers
    idx.upsert_many([(msgspec.structs.replace(data[5][0], text="Section 5\nlater"), data[5][1])])
    assert idx._kw_log is None  # no longer logging
    monkeypatch.undo()  # the snapshot itself is whole
    back = VectorIndex.load(tmp_path / "snap", DIM, "m", text_dir=tmp_path)
    assert back is not None and _keyword_answers(back, WORDS) == answers


def test_a_save_without_adopt_keeps_the_index_built_in_memory(tmp_path: Path) -> None:
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(_rows(200, seed=6))
    before = idx.keywords
    idx.save(tmp_path / "snap")
    assert idx.keywords is before and idx._kw_log is None


def _deleted_keyword_maps() -> list[str]:
    """This process's mappings of a snapshot keyword file since deleted."""
    return [line for line in Path("/proc/self/maps").read_text().splitlines()
            if "keywords.mapped" in line and "(deleted)" in line]


def test_an_index_read_from_a_snapshot_takes_up_the_next_and_maps_no_deleted_file(tmp_path: Path) -> None:
    """A cold start maps its keyword postings from the snapshot's file, which its next save
    deletes: kept, the old index holds the deleted file's blocks; taken up (what the replica does
    for an index read from a snapshot), none is left mapped."""
    data = _rows(400, seed=7)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data[:300])
    idx.save(tmp_path / "snap")
    for take_up in (False, True):
        back = VectorIndex.load(tmp_path / "snap", DIM, "m", text_dir=tmp_path)
        assert back is not None and back.keywords_mapped() and not idx.keywords_mapped()
        back.upsert_many(data[300:])
        back.save(tmp_path / "snap", adopt=take_up)
        gc.collect()
        assert bool(_deleted_keyword_maps()) is not take_up
        assert back.keywords_mapped()  # the old file still, or the new snapshot's
        hits = {h.row.uri for h in back.keyword_search("word350", Query(account="a"), 3)}
        assert data[350][0].uri in hits
        del back
        gc.collect()
    assert not _deleted_keyword_maps()
