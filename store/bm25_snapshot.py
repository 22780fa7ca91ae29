"""The keyword index written into an index snapshot and read back as arrays, so a replica's cold
start does not tokenise and stem every row again.

Rebuilding BM25 from the rows' texts was most of a snapshot's load (about 180 us a row of 100
words: three minutes at a million rows); reading its arrays back is a few seconds. The postings of
every term are written as concatenated arrays with each term's offset, the per-row term ids as
`RowTerms`' own arrays; champion lists and cached weights are not kept (they are rebuilt on use).

Only the postings of rows that still hold their term are written (a removed or rewritten row's
stay in memory until their term is compacted), so each posting's generation is its row's: it is
not written, nor made again one a posting at load (the table reads it through the posting's
label: 0.17 GB less at a million rows, and the mapped labels left unread until a search needs
them). Term frequencies, counts, go as uint8: 5 bytes a posting on disk instead of 12 (about
0.5 KB of a section row's snapshot), zstd-compressed (`store/packed.py`), except the
postings' labels and the rows' term ids, the two largest, which are written as they are and mapped
at load (`MAPPED`): a cold start reads them as it goes instead of filling new memory. Snapshots
written before (an uncompressed `keywords.npz`, with `post_gens`, float32 frequencies and stale
postings; uint16 frequencies and uint32 generations until these were narrowed) still load.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import numpy as np

from skald.store import packed
from skald.store.bm25 import KeywordIndex
from skald.store.postings import GEN, GEN_MASK, TF, TF_MAX, PostingsTable
from skald.store.row_terms import RowTerms

ARRAYS = "keywords.arrays"  # zstd-compressed (`store/packed.py`)
MAPPED = "keywords.mapped"  # the two largest arrays, mapped at load (`packed.map_arrays`)
MAPPED_ARRAYS = ("post_labels", "terms_data")
FILES = (ARRAYS, MAPPED, "keywords.msgpack")
# What snapshots written before hold instead: every array compressed; an uncompressed npz.
OLDER_FILES = ((ARRAYS, "keywords.msgpack"), ("keywords.npz", "keywords.msgpack"))


class _Meta(msgspec.Struct):
    terms: list[str]  # by term id
    lang: dict[int, str]  # label -> its row's language, when not the default
    total: int
    rows: int
    live: int
    end: int


def generations(kw: KeywordIndex, n: int) -> np.ndarray:
    """Each label's generation now (bumped by every removal and rewrite): taken with the rows a
    snapshot holds, so the labels written after them can be told apart on load (`stale`)."""
    with kw._lock:
        out = np.zeros(n, dtype=GEN)
        m = min(n, kw._gen.shape[0])
        out[:m] = kw._gen[:m]
        return out


def save(kw: KeywordIndex, directory: Path, frozen: np.ndarray) -> None:
    """Write the keyword index as it stands (under its lock: a consistent moment), with the
    generations `frozen` of the moment the snapshot's rows were taken."""
    with kw._lock:
        counts, labels, gens, tfs = kw._post.arrays()
        held = gens == kw._gen[labels]  # the postings of rows that hold the term now
        kept = np.concatenate(([0], np.cumsum(held, dtype=np.int64)))
        off = kept[np.concatenate(([0], np.cumsum(counts)))]
        tfs = tfs[held]
        arrays = {
            "post_off": off,
            "post_labels": labels[held],
            "post_tfs": tfs,
            "terms_data": kw._terms.data[: kw._terms.end].copy(),
            "terms_start": kw._terms.start.copy(),
            "terms_count": kw._terms.count.copy(),
            "gen": kw._gen.copy(),
            "dl": kw._dl.copy(),
            "frozen": frozen,
        }
        terms = [""] * len(kw._tid)
        for term, tid in kw._tid.items():
            terms[tid] = term
        meta = _Meta(terms=terms, lang=dict(kw._lang), total=kw._total, rows=kw._terms.rows,
                     live=kw._terms.live, end=kw._terms.end)
    packed.write_mapped(directory / MAPPED, {name: arrays.pop(name) for name in MAPPED_ARRAYS})
    packed.write_arrays(directory / ARRAYS, arrays)
    (directory / "keywords.msgpack").write_bytes(msgspec.msgpack.encode(meta))


def load(directory: Path) -> tuple[KeywordIndex, np.ndarray]:
    """The keyword index `save` wrote (a snapshot's checksums are checked by its caller), and the
    labels whose keywords changed after the snapshot's rows were taken: their rows must be
    indexed again from the snapshot's texts (`stale` labels are removed here)."""
    meta = msgspec.msgpack.decode((directory / "keywords.msgpack").read_bytes(), type=_Meta)
    kw = KeywordIndex()
    if (directory / ARRAYS).exists():
        z = packed.read_arrays(directory / ARRAYS)
        if (directory / MAPPED).exists():
            z.update(packed.map_arrays(directory / MAPPED))
    else:  # a snapshot written before the arrays were compressed
        with np.load(directory / "keywords.npz") as npz:
            z = {name: npz[name] for name in npz.files}
    off, labels = z["post_off"], z["post_labels"]
    tfs = z["post_tfs"]
    if tfs.dtype != TF:  # float32, then uint16, before
        tfs = np.minimum(tfs, TF_MAX).astype(TF)
    if "post_gens" in z:  # written before: every posting with its generation, stale ones too (dropped)
        held = z["post_gens"] == z["gen"][labels]
        off = np.concatenate(([0], np.cumsum(held, dtype=np.int64)))[off]
        labels, tfs = labels[held], tfs[held]
    # Generations as the index keeps them (their low bits: uint32 in snapshots written before; none
    # of the postings kept is retired, so no two of a row's can meet).
    kw._gen = (z["gen"] & GEN_MASK).astype(GEN, copy=False)
    kw._dl = z["dl"]
    live = np.diff(off)
    if off.size != len(meta.terms) + 1 or live.size != len(meta.terms) or int(off[-1]) != labels.size:
        raise ValueError("keyword postings do not match their terms")
    kw._tid = dict(zip(meta.terms, range(len(meta.terms)), strict=True))
    # Each term's postings made when first used (`PostingsTable`), as views into these arrays; a
    # compaction writes only inside its view.
    kw._post = PostingsTable.loaded(off, labels.astype(np.int32, copy=False), kw._gen.copy(), tfs, live)
    terms = RowTerms()
    # Taken as read (a copy with room to spare was 1 s at a million rows): the first write grows it.
    terms.data = z["terms_data"]
    terms.start, terms.count = z["terms_start"], z["terms_count"]
    terms.rows, terms.live, terms.end = meta.rows, meta.live, meta.end
    kw._terms = terms
    frozen = z["frozen"]
    del z
    kw._total = meta.total
    kw._lang = meta.lang
    kw._lang_rows = Counter(meta.lang.values())
    kw._set_languages()
    frozen = (frozen & GEN_MASK).astype(GEN, copy=False)
    n = frozen.shape[0]
    held = np.flatnonzero(kw._terms.count >= 0)
    gen = np.zeros(kw._gen.shape[0], dtype=GEN)
    gen[:n] = frozen
    stale = held[(held >= n) | (kw._gen[held] != gen[held])]
    changed = np.flatnonzero(kw._gen[:n] != frozen)  # written or removed after the rows were taken
    for label in stale.tolist():
        kw.remove(label)
    return kw, changed
