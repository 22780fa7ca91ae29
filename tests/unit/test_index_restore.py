"""A snapshot's rows restored column by column (`store/index/restore.py`) give the index the same
maps and arrays as the index that was saved, and as the same rows saved the older way (texts in the
rows, no keyword index): labels, children, levels, context types, times, text lengths, scope order,
free labels, content hash."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from skald.messages.index import IndexRow
from skald.store import bm25_snapshot, packed
from skald.store.index import Query, VectorIndex
from skald.store.index import snapshot as snapshot_mod
from skald.store.index.types import row_digest, row_key, row_subject_token, scope_key

DIM = 384


def _data(n: int) -> list[tuple[IndexRow, np.ndarray]]:
    """Leaves of two accounts under 30 documents, the documents' summary rows (levels 0 and 1, text
    kept in the row), context types known and not, times that differ per row."""
    rng = np.random.default_rng(4)
    out = []
    for i in range(n):
        v = rng.standard_normal(DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        account, doc = ("a", "b")[i % 7 == 0], f"viking://resources/d{i % 30}.md"
        ctype = ("resource", "memory", "skill", "elsewhere")[i % 4]
        if i % 10 == 0:  # a summary row: the document's, then its directory's
            level = 1 if i % 20 else 0
            uri, parent = (doc, "viking://resources") if level == 1 else ("viking://resources", "viking://")
            uri = f"{uri}?{i}" if level == 0 else uri
        else:
            level, uri, parent = 2, f"{doc}#s{i}", doc
        out.append((IndexRow(account=account, uri=uri, level=level, parent_uri=parent, context_type=ctype,
                             kind="section", abstract=f"abstract {i}", text=f"text of row {i} " * (1 + i % 5),
                             updated_at=1000.0 + i, created_at=500.0 + i / 3, lang="en"), v))
    return out


def _state(idx: Any) -> dict[str, Any]:
    """What a search reads of the rows, over the labels that hold one."""
    live = sorted(idx._labels.values())
    return {
        "labels": dict(idx._labels),
        "children": {k: v for k, v in idx._children.items() if v},
        "by_level": {k: v for k, v in idx._by_level.items() if v},
        "arrays": [a[live].tolist() for a in (idx._level, idx._ctype, idx._updated, idx._created, idx._tlen)],
        "alive": np.flatnonzero(idx._alive[: len(idx._rows)]).tolist(),
        "mix": {k: v for k, v in idx._mix.items() if v},
        "skeys": [idx._skeys[lab] for lab in live],
        "order": list(zip(idx._sorted_keys, idx._sorted_labels, strict=True)),
        "free": sorted(idx._free),
        "live": idx._live,
        "hash": idx.content_hash(),
        "rows": [idx._rows[lab] for lab in live],
        "texts": [idx.leaf_text(lab) if idx._level[lab] == 2 else "" for lab in live],
        "abstracts": [idx.abstract_of(idx._rows[lab]) for lab in live],
    }


def _older(snap: Path, loaded: Any) -> None:
    """`snap` rewritten as a snapshot from before the leaf texts and abstracts left the rows and the
    keyword index was saved: each leaf's text and abstract (as `loaded` read them from the snapshot)
    back in its row, no texts, abstracts or keyword files."""
    rows = msgspec.msgpack.decode(packed.read_bytes(snap / "rows.zst"), type=list[IndexRow | None])
    old = [r if r is None or r.level != 2 else
           msgspec.structs.replace(r, text=loaded.leaf_text(label), abstract=loaded.abstract_of(r))
           for label, r in enumerate(rows)]
    meta = msgspec.json.decode((snap / "meta.json").read_bytes())
    packed.write_bytes(snap / "rows.zst", msgspec.msgpack.encode(old))
    meta["crc32"]["rows.zst"] = zlib.crc32((snap / "rows.zst").read_bytes())
    for name in ("texts.bin", "texts.npy", "texts.dict", "abstracts.bin", "abstracts.npy", "abstracts.dict",
                 *bm25_snapshot.FILES):
        if (snap / name).exists():
            os.remove(snap / name)
        meta["crc32"].pop(name, None)
    (snap / "meta.json").write_bytes(msgspec.json.encode(meta))


@pytest.mark.parametrize("saved_hash", [True, False])
def test_a_loaded_index_is_the_one_saved(tmp_path, monkeypatch, saved_hash) -> None:  # type: ignore[no-untyped-def]
    data = _data(900)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    for r, _ in data[5:60:9]:  # free labels among the rows
        idx.delete(r.account, r.uri, r.level)
    snap = tmp_path / "snap"
    idx.save(snap)
    if not saved_hash:  # a snapshot from before the content hash was saved computes it
        meta = msgspec.json.decode((snap / "meta.json").read_bytes())
        del meta["chash"]
        (snap / "meta.json").write_bytes(msgspec.json.encode(meta))
    back = VectorIndex.load(snap, DIM, "m")
    assert back is not None
    assert _state(back) == _state(idx)
    assert back.get("a", "viking://resources/d1.md#s1", 2).abstract == "abstract 1"  # type: ignore[union-attr]
    _older(snap, back)  # texts moved out of the rows and keywords made again, then the same restore
    slow = VectorIndex.load(snap, DIM, "m")
    assert slow is not None and _state(slow) == _state(back)
    # The fields rows repeat are one string each.
    parents = {id(r.parent_uri) for r in back._rows if r is not None and r.parent_uri.endswith("d3.md")}
    assert len(parents) == 1


def test_rows_written_while_a_snapshot_was_saved_are_restored_as_the_snapshot_holds_them(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Labels the keyword index changed after the rows were taken are made again from the rows and
    texts the snapshot holds (their text lengths too), as an older snapshot of the same rows is."""
    data = _data(600)
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.delete("a", data[3][0].uri, 2)
    real_freeze = snapshot_mod.IndexSnapshot._freeze

    def freeze_then_write(self, *a):  # type: ignore[no-untyped-def]
        got = real_freeze(self, *a)
        self.upsert_many([(msgspec.structs.replace(data[11][0], text="rewritten later, longer than before " * 3),
                           data[11][1])])
        self.delete("a", data[22][0].uri, 2)
        self.upsert_many([(msgspec.structs.replace(data[23][0], uri="viking://resources/new.md#x", text="new"),
                           data[23][1])])
        return got

    monkeypatch.setattr(snapshot_mod.IndexSnapshot, "_freeze", freeze_then_write)
    idx.save(tmp_path / "snap")
    monkeypatch.undo()
    back = VectorIndex.load(tmp_path / "snap", DIM, "m")
    assert back is not None
    label = back._labels[row_key("a", data[11][0].uri, 2)]
    assert back._tlen[label] == len(data[11][0].text)  # as the snapshot's rows took it
    assert row_key("a", data[22][0].uri, 2) in back._labels
    _older(tmp_path / "snap", back)
    slow = VectorIndex.load(tmp_path / "snap", DIM, "m")
    assert slow is not None and _state(slow) == _state(back)
    for word in ("rewritten", "new", "11", "22", "23", "42", "row", "text"):
        hits = [[(h.row.uri, round(h.score, 5)) for h in i.keyword_search(word, Query(account="a"), 20)]
                for i in (back, slow)]
        if word in ("row", "text"):  # in every row, scores tied: which tied rows a champion list keeps
            hits = [[score for _, score in found] for found in hits]  # follows the postings' order
        assert hits[0] == hits[1]
    assert back.keyword_search("row", Query(account="a"), 5)


def test_a_loaded_keyword_index_written_to_and_saved_again_answers_as_one_built_whole(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The terms a snapshot held stay ranges of its arrays until used (`PostingsTable`): after a
    load, rows added (new terms and old ones), rewritten and removed, a second snapshot and its load
    answer every word as an index given the same rows from the start."""
    data = _data(700)
    first, rest = data[:500], data[500:]
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(first)
    idx.save(tmp_path / "one")
    back = VectorIndex.load(tmp_path / "one", DIM, "m")
    assert back is not None
    rewritten = (msgspec.structs.replace(first[42][0], text="entirely new words zebra quartz"), first[42][1])
    gone = first[7][0]
    changes: list[Any] = [("up", rest), ("up", [rewritten]), ("del", gone)]
    whole = VectorIndex(DIM, "m", text_dir=tmp_path)
    whole.upsert_many(first)
    # A removal alone (no new term) and a snapshot: the terms never used after it stay one range.
    for target in (back, whole):
        target.delete(first[3][0].account, first[3][0].uri, first[3][0].level)
    back.save(tmp_path / "mid")
    back = VectorIndex.load(tmp_path / "mid", DIM, "m")
    assert back is not None
    for target in (back, whole):
        for kind, what in changes:
            if kind == "up":
                target.upsert_many(what)
            else:
                target.delete(what.account, what.uri, what.level)
    back.save(tmp_path / "two")
    again = VectorIndex.load(tmp_path / "two", DIM, "m")
    assert again is not None
    words = ["zebra", "quartz", "row", "text", "of", "3", "42", "7", "498", "499", "600", "699", "abstract"]
    for i in (back, again):
        for word in words:
            got = [(h.row.uri, round(h.score, 4)) for h in i.keyword_search(word, Query(account="a"), 30)]
            want = [(h.row.uri, round(h.score, 4)) for h in whole.keyword_search(word, Query(account="a"), 30)]
            assert got == want, word


def test_a_documents_table_of_contents_is_kept_out_of_its_row_and_read_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A long document's L1 row (its table of contents, a line per section) is held in the text
    heap, not on the row searches return: `get` and `overviews` read it back, its words are still
    keyword-indexed, its length is still the row's, and a snapshot loads it so, one from before (the
    text on its row) too. A row's title is not kept at all (nothing served reads it)."""
    data = _data(300)
    toc = "# Handbook\n\n## Sections\n" + "\n".join(
        f"- [Step {s}](#s{s}) (lines {4 * s}-{4 * s + 3}): zebracorn drill {s}" for s in range(40))
    v = np.random.default_rng(9).standard_normal(DIM).astype(np.float32)
    doc = IndexRow(account="a", uri="viking://resources/hb.md", level=1, parent_uri="viking://resources",
                   context_type="resource", kind="document", abstract="the handbook", text=f"hb.md\n{toc}",
                   lang="en", title="Handbook › of the platform")
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many([*data, (doc, v / np.linalg.norm(v))])

    def check(ix: Any) -> None:
        held = ix.held("a", doc.uri, 1)
        assert held.text == "" and held.abstract == "the handbook" and held.title == ""
        assert ix.get("a", doc.uri, 1) == msgspec.structs.replace(doc, title="")
        assert ix.overviews("a", [doc.uri, "viking://resources/none.md"]) == [doc.text, ""]
        label = ix._labels[row_key("a", doc.uri, 1)]
        assert ix._tlen[label] == len(doc.text)
        labels, _ = ix.keywords.search("zebracorn", 5, lambda ls: np.ones(len(ls), dtype=bool))
        assert labels.tolist() == [label]

    check(idx)
    snap = tmp_path / "snap"
    idx.save(snap)
    back = VectorIndex.load(snap, DIM, "m")
    assert back is not None
    check(back)
    # A snapshot from before: the table of contents on its row and not in the texts (their table
    # has no entry for it), the texts and keywords saved.
    rows = msgspec.msgpack.decode(packed.read_bytes(snap / "rows.zst"), type=list[IndexRow | None])
    label = next(i for i, r in enumerate(rows) if r is not None and r.kind == "document")
    rows[label] = msgspec.structs.replace(rows[label], text=doc.text, title=doc.title)
    packed.write_bytes(snap / "rows.zst", msgspec.msgpack.encode(rows))
    table = np.load(snap / "texts.npy")
    table[label, 1:] = (-1, 0)
    np.save(snap / "texts.npy", table)
    meta = msgspec.json.decode((snap / "meta.json").read_bytes())
    for name in ("rows.zst", "texts.npy"):
        meta["crc32"][name] = zlib.crc32((snap / name).read_bytes())
    (snap / "meta.json").write_bytes(msgspec.json.encode(meta))
    before = VectorIndex.load(snap, DIM, "m")
    assert before is not None
    check(before)
    assert _state(before) == _state(back)
    _older(snap, back)  # and older still: no texts saved, every row keyword-indexed again
    oldest = VectorIndex.load(snap, DIM, "m")
    assert oldest is not None
    check(oldest)


def test_a_rows_key_sorts_it_by_scope_while_its_digest_and_subject_name_it_as_before() -> None:
    """One string per row is both the index's key for it and its place in scope order; a row's
    digest (replicas compare content hashes, snapshots save them) and its subject on the index
    stream still name it `account NUL URI NUL level`, as streams and snapshots already written do."""
    row = IndexRow(account="a", uri="viking://resources/d.md#s1", level=2, parent_uri="viking://resources/d.md",
                   context_type="resource", content_hash="h", updated_at=5.0)
    name = "a\x00viking://resources/d.md#s1\x002"
    assert row_subject_token("a", row.uri, 2) == hashlib.sha1(name.encode()).hexdigest()
    assert row_digest(row) == int.from_bytes(hashlib.blake2b(f"{name}\x00h\x005.0".encode(), digest_size=16).digest(),
                                             "big")
    assert row_key("a", row.uri, 2).startswith(scope_key("a", "viking://resources/d.md"))
    assert not row_key("a", "viking://resources/d.mdx", 2).startswith(scope_key("a", "viking://resources/d.md"))
    # A section never shares a key with a path ('d.md' a file when its section is indexed, then a
    # directory holding 's1', whichever change the stream applies first).
    assert row_key("a", "viking://resources/d.md/s1", 2) != row_key("a", row.uri, 2)
    idx = VectorIndex(DIM, "m")
    vec = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    child = msgspec.structs.replace(row, uri="viking://resources/d.md/s1", parent_uri="viking://resources/d.md")
    idx.upsert_many([(child, vec), (row, vec)])
    assert idx.delete("a", row.uri, 2)
    assert idx.get("a", child.uri, 2) is not None and len(idx) == 1
    assert [h.row.uri for h in idx.search(vec, Query(account="a", prefixes=["viking://resources/d.md"]), 5)[0]] == [
        child.uri]
