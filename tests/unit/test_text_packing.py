"""Leaf texts stored compressed with a dictionary the heap trains on its first megabyte: every text
reads back as written (short ones, ones that begin like a zstd frame would, other scripts), from
several threads, through a compaction, a snapshot and its load; a snapshot whose dictionary is
damaged is refused."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import msgspec
import numpy as np

from skald.messages.index import IndexRow
from skald.store.index import VectorIndex
from skald.store.index import texts as texts_mod
from skald.store.index.texts import TextHeap

DIM = 32


def _texts(n: int, seed: int = 5) -> list[str]:
    """Sections of 100 words from a 3,000-word vocabulary, a few oddities among them."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    out = [f"## Step {i}\n\n" + " ".join(rng.choices(vocab, k=100)) + f". Code R{i}." for i in range(n)]
    out[1500] = "(\xb5 not a frame, though it starts with its first byte"
    out[1501] = "short"
    out[1502] = "Grüße aus 東京, " * 20
    out[1503] = ""
    return out


def test_texts_are_packed_once_a_dictionary_is_trained_and_read_back_as_written(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    texts = _texts(3000)
    heap = TextHeap(tmp_path)
    for label, t in enumerate(texts):
        heap.grow(label + 1)
        heap.put(label, t)
    assert heap.packer.dictionary is not None
    raw = sum(len(t.encode()) for t in texts[2000:])
    stored = int(heap.size[2000:].sum())
    assert stored < 0.6 * raw  # the dictionary's share: plain zstd keeps about 0.62 of such text
    assert int(heap.size[0]) == len(texts[0].encode())  # before the dictionary: as written
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(heap.get, range(3000))) == texts
    # Rewritten twice (more garbage than live texts), then compacted: copied as stored, still read.
    monkeypatch.setattr(texts_mod, "COMPACT_FROM", 0)
    for label in [*range(3000), *range(3000)]:
        texts[label] = texts[label] + " again"
        heap.put(label, texts[label])
    heap.compact()
    assert heap.garbage() == 0
    assert [heap.get(label) for label in range(3000)] == texts


def _rows(texts: list[str]) -> list[tuple[IndexRow, np.ndarray]]:
    rng = np.random.default_rng(9)
    out = []
    for i, t in enumerate(texts):
        v = rng.standard_normal(DIM).astype(np.float32)
        doc = f"viking://resources/d{i % 40}.md"
        out.append((IndexRow(account="a", uri=f"{doc}#s{i}", level=2, parent_uri=doc, context_type="resource",
                             kind="section", abstract=f"section {i}", text=t), v / np.linalg.norm(v)))
    return out


def test_a_snapshot_keeps_the_dictionary_its_texts_need(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _rows(_texts(2500))
    idx = VectorIndex(DIM, "m", text_dir=tmp_path)
    idx.upsert_many(data)
    idx.save(tmp_path / "snap")
    assert (tmp_path / "snap" / "texts.dict").read_bytes() == idx._texts.packer.dictionary
    back = VectorIndex.load(tmp_path / "snap", DIM, "m", text_dir=tmp_path)
    assert back is not None
    uris = [r.uri for r, _ in data]
    assert back.leaf_texts("a", uris) == [r.text for r, _ in data]
    # The loaded heap packs what comes next with the same dictionary.
    later = msgspec.structs.replace(data[3][0], text=data[7][0].text + " later")
    back.upsert_many([(later, data[3][1])])
    assert back.leaf_texts("a", [later.uri]) == [later.text]
    assert back._texts.packer.dictionary == idx._texts.packer.dictionary
    # A damaged dictionary: the snapshot is refused, not read as garbage.
    d = bytearray((tmp_path / "snap" / "texts.dict").read_bytes())
    d[len(d) // 2] ^= 0x10
    (tmp_path / "snap" / "texts.dict").write_bytes(bytes(d))
    assert VectorIndex.load(tmp_path / "snap", DIM, "m", text_dir=tmp_path) is None
