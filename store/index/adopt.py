"""After a replica saves a snapshot, its keyword index is replaced by the one the snapshot holds
when `snapshot_maps_keywords` is set (off by default: the replica's writes then run on a thread
of their own, so that the index dropped here was not allocated in the arena the searches'
allocations come from, which cost them 0.2-0.6 ms; a long catch-up is slower that way,
docs/design/scale.md) or when its keyword index
was itself read from a snapshot (a cold start's). The snapshot's postings are mapped from its
file (`bm25_snapshot.load`), where the index an ingest built holds every posting in memory with
its generation (7 bytes a posting; 0.55 KB a section row of 100 words more than the index taken
up, at 200,000 rows). The mapped pages are read as searches need them and are the page cache's
to drop. It also lets go of the previous snapshot's mapped file, which the save has just
deleted: mapped, its blocks stayed allocated on disk.

Writes go on while the snapshot is saved and loaded, so every label keyword-written since its
rows were taken is logged (`IndexRows._kw_log`) and indexed again into the loaded index from the
row as it stands: in chunks with the index lock held only to read them, then the last few under
the lock, where the two indexes are swapped. A search holding the old index finishes on it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from skald.store import bm25_snapshot
from skald.store.bm25 import KeywordIndex
from skald.store.index.restore import keyword_item
from skald.store.index.rows import IndexRows

log = logging.getLogger("skald.store.index")

CHUNK = 1_024  # labels read under the index lock at a time (a text each: about 10 ms)
GIVE_UP_S = 120.0  # writes outpacing the catch-up this long: the index built in memory is kept


def adopt_keywords(idx: IndexRows, directory: Path) -> bool:
    """Swap `idx`'s keyword index for the snapshot's in `directory` (whose rows were taken when
    `idx._kw_log` was started), brought up to the writes since; whether it was swapped. Any
    failure keeps the index as it is; the caller (`IndexSnapshot.save`) stops the log either way."""
    try:
        kw, _ = bm25_snapshot.load(directory)
    except Exception as e:  # noqa: BLE001 - unreadable or gone: the index in memory serves on
        log.warning("index snapshot %s: its keyword index was not taken up (%s: %s)", directory, type(e).__name__, e)
        return False  # `save` stops the log
    done, warmed, start = 0, False, time.monotonic()
    while True:
        with idx._lock:
            written = idx._kw_log
            if written is None:
                return False
            behind = len(written) - done
            if warmed and behind <= CHUNK:
                _apply(kw, _items(idx, written[done:]))
                idx.keywords, idx._kw_log = kw, None
                return True
            if time.monotonic() - start > GIVE_UP_S:
                log.warning("index snapshot %s: writes kept ahead of its keyword index; kept the one in memory",
                            directory)
                return False
            take = written[done : done + CHUNK]
            items = _items(idx, take)
            done += len(take)
        _apply(kw, items)
        if not warmed and behind <= CHUNK:  # caught up: its first searches find champion lists chosen
            kw.warm_champions()
            warmed = True


def _items(idx: IndexRows, labels: list[int]) -> list[tuple[int, tuple[int, str, str] | None]]:
    """Each label once, with what the keyword index is to hold for it now (None: no row)."""
    out: list[tuple[int, tuple[int, str, str] | None]] = []
    for label in dict.fromkeys(labels):
        row = idx._rows[label]  # a logged label was given its place in the rows before it was logged
        out.append((label, None if row is None else keyword_item(idx, label, row)))
    return out


def _apply(kw: KeywordIndex, items: list[tuple[int, tuple[int, str, str] | None]]) -> None:
    for label, item in items:
        if item is None:
            kw.remove(label)
    kw.add_many([item for _, item in items if item is not None])
