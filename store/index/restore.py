"""A loaded snapshot's rows made into the index's maps and arrays (labels, children, levels,
times, scope keys, the keyword rows to redo).

Restored field by field over every row at once: `map`, `zip` and numpy iterate in C, where a
Python loop over the rows cost 6-7 us a row (6-7 s of a million-row cold start). An older snapshot
first has its leaf texts and abstracts moved out of its rows (held in the rows then) and every row
keyword-indexed again (no keyword index saved); the restore itself is the same."""

from __future__ import annotations

import sys
from collections import deque
from itertools import compress, repeat
from operator import attrgetter, not_

import msgspec
import numpy as np

from skald.messages.index import IndexRow
from skald.store.index.rows import SHARED_FIELDS, IndexRows
from skald.store.index.types import CONTEXT_TYPES, row_digest, row_keys, text_held
from skald.store.language import DEFAULT

REINDEX_BATCH = 4_096  # rows a load keyword-indexes at once (their texts held meanwhile)
_CTYPE = {name: code for code, name in enumerate(CONTEXT_TYPES)}


def restore(idx: IndexRows, rows: list[IndexRow | None], texts_saved: bool, abstracts_saved: bool,
            redo: set[int] | None, chash: int | None) -> None:
    """Fill `idx` from `rows` as read from a snapshot: `redo` the labels whose keyword rows are to
    be made again (None: every one, the keyword index was not saved); `chash` the rows' saved
    content hash (None: an older snapshot, computed here)."""
    if chash is not None:
        idx._chash = chash
    if not texts_saved:
        _texts_out_of_rows(idx, rows)
    if not abstracts_saved:
        _abstracts_out_of_rows(idx, rows)
    if redo is None:
        redo = {label for label, row in enumerate(rows) if row is not None}
    _columns(idx, rows, redo, chash is None)
    idx._rows = rows


def keyword_item(idx: IndexRows, label: int, row: IndexRow, text: str | None = None) -> tuple[int, str, str]:
    """What the keyword index holds for a row, as `IndexRows.upsert_many` gave it: its text, else
    its abstract (a leaf's in the abstract heap), in its language. `text`: the row's text, when
    the caller has read it already."""
    if text is None:
        text = idx._texts.get(label) if text_held(row.level, row.kind) else row.text
    return label, text or (idx._abstracts.get(label) if row.level == 2 else row.abstract), row.lang or DEFAULT


def _texts_out_of_rows(idx: IndexRows, rows: list[IndexRow | None]) -> None:
    """A snapshot from before the leaf texts left the rows: each text into the text heap (the rows
    keep none), every row's text length noted, as a saved texts table would give them."""
    for label, row in enumerate(rows):
        if row is None:
            continue
        idx._tlen[label] = len(row.text)
        if text_held(row.level, row.kind) and row.text:
            idx._texts.put(label, row.text)
            rows[label] = msgspec.structs.replace(row, text="")


def _abstracts_out_of_rows(idx: IndexRows, rows: list[IndexRow | None]) -> None:
    """A snapshot from before the leaf abstracts left the rows: each into the abstract heap."""
    for label, row in enumerate(rows):
        if row is not None and row.level == 2 and row.abstract:
            idx._abstracts.put(label, row.abstract)
            rows[label] = msgspec.structs.replace(row, abstract="")


def _columns(idx: IndexRows, rows: list[IndexRow | None], redo: set[int], digest: bool) -> None:
    """Every leaf's text is in the text heap and its length in `_tlen`, and the keyword index holds
    every label but `redo`."""
    present = [row is not None for row in rows]
    labels = list(compress(range(len(rows)), present))
    live: list[IndexRow] = list(compress(rows, present))  # type: ignore[arg-type]
    if len(live) < len(rows):
        for label in compress(range(len(rows)), map(not_, present)):
            idx._free.append(label)
            idx.keywords.remove(label)  # a row written into a free label after the rows were taken
    # The fields many rows repeat, one string each, set in place on rows that are this load's own.
    setattr_ = msgspec.structs.force_setattr
    for field in SHARED_FIELDS:
        deque(map(setattr_, live, repeat(field), map(sys.intern, map(attrgetter(field), live))), maxlen=0)
    deque(map(setattr_, live, repeat("title"), repeat("")), maxlen=0)  # not kept (`IndexRows.upsert_many`)
    count = len(live)
    accounts = list(map(attrgetter("account"), live))
    uris = list(map(attrgetter("uri"), live))
    level = np.fromiter(map(attrgetter("level"), live), dtype=np.int8, count=count)
    keys = row_keys(accounts, uris, level.tolist())
    idx._labels.update(zip(keys, labels, strict=True))
    if digest:
        for row in live:
            idx._chash ^= row_digest(row)
    children = idx._children
    for pkey, label in zip(map("{}\x00{}".format, accounts, map(attrgetter("parent_uri"), live)), labels, strict=True):
        if (kids := children.get(pkey)) is None:
            children[pkey] = kids = set()
        kids.add(label)
    at = np.asarray(labels, dtype=np.int64)
    ctype = np.fromiter(map(_CTYPE.get, map(attrgetter("context_type"), live), repeat(-1)), dtype=np.int8,
                        count=count)
    idx._level[at], idx._ctype[at], idx._alive[at] = level, ctype, True
    idx._updated[at] = np.fromiter(map(attrgetter("updated_at"), live), dtype=np.float64, count=count)
    idx._created[at] = np.fromiter(map(attrgetter("created_at"), live), dtype=np.float64, count=count)
    idx._live += count
    # A summary row keeps its text and its length is taken from it; a leaf's length is in the
    # table, and so is a long document's table of contents' (in the text heap since it left its
    # row: one a snapshot from before holds on the row goes there now).
    for i in np.flatnonzero(level != 2).tolist():
        if text := live[i].text:
            label = labels[i]
            idx._tlen[label] = len(text)
            if text_held(live[i].level, live[i].kind):
                idx._texts.put(label, text)
                rows[label] = live[i] = msgspec.structs.replace(live[i], text="")
    for lvl in np.unique(level).tolist():
        idx._by_level.setdefault(lvl, set()).update(at[level == lvl].tolist())
    mix = np.bincount(level.astype(np.int64) * 256 + (ctype.astype(np.int64) + 128))  # (level, type) as one code
    for code in np.flatnonzero(mix).tolist():
        idx._mix[(code // 256, code % 256 - 128)] += int(mix[code])
    pending: list[tuple[int, str, str]] = []
    for label in sorted(redo):
        if label >= len(rows) or (again := rows[label]) is None:
            continue
        text = idx._texts.get(label) if text_held(again.level, again.kind) else again.text
        idx._tlen[label] = len(text)
        pending.append(keyword_item(idx, label, again, text))
        if len(pending) >= REINDEX_BATCH:
            idx.keywords.add_many(pending)
            pending = []
    idx.keywords.add_many(pending)
    if count == len(rows):  # a row's key is also its place in scope order: one string for both
        idx._skeys = keys
    else:
        each = iter(keys)
        idx._skeys = [next(each) if row is not None else "" for row in rows]
    order = sorted(range(count), key=keys.__getitem__)
    idx._sorted_keys = [keys[i] for i in order]
    idx._sorted_labels = [labels[i] for i in order]
