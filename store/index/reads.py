"""Reads of single rows and of the index's size: a row whole (its leaf text read back from the
text file), the row object as held, leaf texts for served sections, and the counts `stats` reports."""

from __future__ import annotations

from collections import Counter

import msgspec

from skald.messages.index import IndexRow
from skald.store.index.rows import IndexRows
from skald.store.index.texts import TextHeap
from skald.store.index.types import row_key, text_held


class IndexReads(IndexRows):
    """Rows read one at a time, and the index's counts."""

    def live_rows(self) -> list[IndexRow]:
        """Every row, a leaf's without its text and abstract (`leaf_text`, `abstract_of`)."""
        with self._lock:
            return [r for r in self._rows if r is not None]

    def get(self, account: str, uri: str, level: int) -> IndexRow | None:
        """One row whole, a leaf's text and abstract (a document's table of contents) read back."""
        with self._lock:
            label = self._labels.get(row_key(account, uri, level))
            if label is None or (row := self._rows[label]) is None:
                return None
            if text_held(row.level, row.kind):
                back = {"text": self._texts.get(label) if self._tlen[label] else ""}
                if row.level == 2:
                    back["abstract"] = self._abstracts.get(label)
                row = msgspec.structs.replace(row, **back)
            return row

    def abstract_of(self, row: IndexRow) -> str:
        """A row's abstract: a leaf's is kept in `_abstracts`, not on the row searches return, and
        read for the hits a reply serves (a find's results, the candidates a context block keeps)."""
        if row.level != 2 or row.abstract:
            return row.abstract
        with self._lock:
            label = self._labels.get(row_key(row.account, row.uri, 2))
            return "" if label is None else self._abstracts.get(label)

    def held(self, account: str, uri: str, level: int) -> IndexRow | None:
        """The row object the index holds (a leaf's without its text and abstract): what searches
        return, so a cache keyed on the object's identity (the retriever's served cache) matches
        their hits."""
        label = self._labels.get(row_key(account, uri, level))
        return None if label is None else self._rows[label]

    def leaf_texts(self, account: str, uris: list[str]) -> list[str]:
        """The text of each leaf row named ("" for one not indexed): what a served section carries."""
        return self._heap_texts(self._texts, account, uris)

    def leaf_abstracts(self, account: str, uris: list[str]) -> list[str]:
        """The abstract of each leaf row named ("" for one not indexed)."""
        return self._heap_texts(self._abstracts, account, uris)

    def overviews(self, account: str, uris: list[str]) -> list[str]:
        """The L1 text (a table of contents) of each long document named ("" for one not indexed)."""
        return self._heap_texts(self._texts, account, uris, 1)

    def _heap_texts(self, heap: TextHeap, account: str, uris: list[str], level: int = 2) -> list[str]:
        """What `heap` holds for each row named at `level` ("" for one not indexed)."""
        with self._lock:
            return [heap.get(lab) if (lab := self._labels.get(row_key(account, u, level))) is not None else ""
                    for u in uris]

    def leaf_text(self, label: int) -> str:
        """A leaf row's text: kept in `_texts`, not on the row, and read for the rows a reply serves."""
        with self._lock:
            return self._texts.get(label)

    def stats(self) -> dict[str, int]:
        with self._lock:  # counts kept by every write: a health check costs nothing at a million rows
            by_level = Counter[int]()
            for (level, _), count in self._mix.items():
                by_level[level] += count
            return {
                "rows": self._live,
                "level0": by_level[0],
                "level1": by_level[1],
                "level2": by_level[2],
                "applied_seq": self.applied_seq,
                "dim": self.dim,
                "graph_pending": len(self._pending),
            }
