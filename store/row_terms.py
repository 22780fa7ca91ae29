"""Each row's term ids for the keyword index, all rows in one array: what removing a row retires
and what `coverage` and `words_in` read, at 4 bytes a term.

A dict of one numpy array per row cost about 360 bytes a row over its term ids (the dict entry,
the key, the array object), a third of the keyword index's memory. Here a row's ids are a run in
one int32 array (appended; a rewritten or removed row's old run is garbage, squeezed out in one
vectorised pass once it outgrows the live runs), found by a start and a length per label.
"""

from __future__ import annotations

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int32)


class RowTerms:
    """label -> sorted int32 term ids, as runs in one array."""

    def __init__(self, capacity: int = 1024) -> None:
        self.data = np.zeros(4096, dtype=np.int32)
        self.end = 0
        self.start = np.zeros(capacity, dtype=np.int64)
        self.count = np.full(capacity, -1, dtype=np.int32)  # -1: the label holds no row
        self.rows = 0
        self.live = 0  # ids in live runs

    def __len__(self) -> int:
        return self.rows

    def _grow_labels(self, label: int) -> None:
        old = self.count.shape[0]
        if label < old:
            return
        size = max(label + 1, old * 2)
        start = np.zeros(size, dtype=np.int64)
        start[:old] = self.start
        count = np.full(size, -1, dtype=np.int32)
        count[:old] = self.count
        self.start, self.count = start, count

    def set(self, label: int, tids: np.ndarray) -> None:
        self.pop(label)
        self._grow_labels(label)
        n = int(tids.size)
        if self.end + n > self.data.shape[0]:
            self._compact()
            if self.end + n > self.data.shape[0]:
                grown = np.zeros(max(self.end + n, self.data.shape[0] * 3 // 2), dtype=np.int32)
                grown[: self.end] = self.data[: self.end]
                self.data = grown
        self.data[self.end : self.end + n] = tids
        self.start[label], self.count[label] = self.end, n
        self.end += n
        self.rows += 1
        self.live += n

    def get(self, label: int) -> np.ndarray:
        if label < 0 or label >= self.count.shape[0] or self.count[label] < 0:
            return _EMPTY
        s = int(self.start[label])
        return self.data[s : s + int(self.count[label])]

    def many(self, labels: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(every label's ids one run after another, each label's count): `get` of many labels
        in one gather, not a slice and a Python call a label (a find asks this of the 50-100 rows
        it weighs by coverage and of its hits; an unknown or negative label holds none)."""
        lab = np.asarray(labels, dtype=np.int64)
        known = (lab >= 0) & (lab < self.count.shape[0])
        lens = np.zeros(lab.size, dtype=np.int64)
        starts = np.zeros(lab.size, dtype=np.int64)
        lens[known] = np.maximum(self.count[lab[known]], 0)
        starts[known] = self.start[lab[known]]
        at = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
        return self.data[at], lens

    def pop(self, label: int) -> np.ndarray | None:
        """The label's ids (a copy), forgotten; None when it held none."""
        if label >= self.count.shape[0] or self.count[label] < 0:
            return None
        got = self.get(label).copy()
        self.count[label] = -1
        self.rows -= 1
        self.live -= got.size
        return got

    def _compact(self) -> None:
        """Squeeze out the runs of rewritten and removed rows, when they are most of the array."""
        if self.end - self.live < max(self.live, 1 << 16):
            return
        labels = np.flatnonzero(self.count >= 0)
        lens = self.count[labels].astype(np.int64)
        starts = self.start[labels]
        new_starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if labels.size else lens
        src = np.repeat(starts - new_starts, lens) + np.arange(int(lens.sum()))
        self.data[: src.size] = self.data[src]
        self.start[labels] = new_starts
        self.end = int(src.size)
