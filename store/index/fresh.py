"""Float32 copies of the rows waiting for the graph, in pages of `PAGE` slots.

A row the graph has not taken in yet is scored from its exact vector, kept here until the builder
has put it in (the graph is given the exact vector too). The copies were one block, doubled when
full: on the 8-bit graph the builder fell hundreds of thousands of rows behind a million-row
ingest, and each doubling copied every row handed a slot since the block was last empty (768 MB at
2^19 of them) under the index's lock; the writes stopped for 3 s, and the replica, seeing none
applied, recreated its follower. In pages nothing is copied as they grow, and a page whose rows
are all in the graph is freed, so the copies cost what the graph's lag is, not what the ingest was.

Slots are handed out in order and the builder takes rows in the order they came, so the rows a
search over the waiting ones reads are mostly a contiguous run of slots: products go a page at a
time over the run's span (`dot`), and past `signs.SHORTLIST_FROM` rows a shortlist is chosen by
their sign codes (`signs.py`) first.
"""

from __future__ import annotations

import numpy as np

from skald.store.index import signs

PAGE = 32_768  # slots a page: 48 MB of float32 at 384 dimensions


class FreshRows:
    """Rows by slot: `add` hands out the next slots, `drop` gives slots back."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._pages: list[np.ndarray | None] = []
        self._held = np.zeros(0, dtype=np.int64)  # slots still held, by page
        self.used = 0  # slots handed out
        self.signs: np.ndarray | None = None  # sign codes by slot, (words, slots) uint64, once asked for
        self.centre: np.ndarray | None = None  # what the codes are taken around

    def add(self, mat: np.ndarray) -> np.ndarray:
        """Keep the rows of `mat`; their slots."""
        lo, hi = self.used, self.used + mat.shape[0]
        while len(self._pages) * PAGE < hi:
            self._pages.append(np.empty((PAGE, self.dim), dtype=np.float32))
        if self._held.size < len(self._pages):
            self._held = np.concatenate((self._held, np.zeros(len(self._pages) - self._held.size, dtype=np.int64)))
        for a, b in self._spans(lo, hi):
            page = self._pages[a // PAGE]
            assert page is not None  # a page being written is never freed
            page[a % PAGE : a % PAGE + b - a] = mat[a - lo : b - lo]
            self._held[a // PAGE] += b - a
        if self.signs is not None and self.centre is not None:
            if self.signs.shape[1] < hi:
                grown = np.zeros((self.signs.shape[0], max(hi, 2 * self.signs.shape[1])), dtype=np.uint64)
                grown[:, :lo] = self.signs[:, :lo]
                self.signs = grown
            self.signs[:, lo:hi] = signs.codes(mat - self.centre)
        self.used = hi
        return np.arange(lo, hi, dtype=np.int64)

    def drop(self, slots: np.ndarray) -> None:
        """Slots no longer held (each given once); a page left with none is freed, unless it is
        the one being filled."""
        if slots.size == 0:
            return
        counts = np.bincount(slots // PAGE, minlength=self._held.size)
        self._held -= counts
        for p in np.flatnonzero((counts > 0) & (self._held == 0)).tolist():
            if (p + 1) * PAGE <= self.used:
                self._pages[p] = None

    @staticmethod
    def _spans(lo: int, hi: int) -> list[tuple[int, int]]:
        """[lo, hi) cut at page boundaries."""
        cuts = [*range((lo // PAGE + 1) * PAGE, hi, PAGE)]
        return list(zip([lo, *cuts], [*cuts, hi], strict=True))

    def rows(self, slots: np.ndarray) -> np.ndarray:
        """The float32 rows of held slots."""
        out = np.empty((slots.size, self.dim), dtype=np.float32)
        if slots.size == 0:
            return out
        first, last = int(slots.min()) // PAGE, int(slots.max()) // PAGE
        if first == last:  # one page (most reads): one gather
            page = self._pages[first]
            assert page is not None  # a held slot's page is never freed
            return np.take(page, slots - first * PAGE, axis=0, out=out)
        order = np.argsort(slots, kind="stable")
        ordered = slots[order]
        cuts = np.searchsorted(ordered, np.arange(first + 1, last + 1) * PAGE).tolist()
        for p, a, b in zip(range(first, last + 1), [0, *cuts], [*cuts, slots.size], strict=True):
            if a < b:
                page = self._pages[p]
                assert page is not None
                out[order[a:b]] = page[ordered[a:b] - p * PAGE]
        return out

    def _span_dot(self, lo: int, hi: int, vec: np.ndarray) -> np.ndarray:
        """Products of every slot in [lo, hi) with `vec` (zero on a freed page, whose slots none asks)."""
        out = np.zeros(hi - lo, dtype=np.float32)
        for a, b in self._spans(lo, hi):
            page = self._pages[a // PAGE]
            if page is not None:
                np.matmul(page[a % PAGE : a % PAGE + b - a], vec, out=out[a - lo : b - lo])
        return out

    def dot(self, slots: np.ndarray, vec: np.ndarray) -> np.ndarray:
        """Products of held slots. Many of them (an ingest the graph is taking in): exact for a
        shortlist chosen by their sign codes, estimated below it for the rest (`signs.scored`).
        Otherwise exact: over the span between them when they fill at least half of it (a
        contiguous product, the released slots' rows scored and dropped, beats copying the held
        ones out first), else over a gather of them."""
        lo, hi = int(slots.min()), int(slots.max()) + 1
        run = hi - lo == slots.size and bool(np.all(np.diff(slots) > 0))
        if slots.size >= signs.SHORTLIST_FROM:
            coded, centre = self._coded()
            block = coded[:, lo:hi] if run else coded[:, slots]
            return signs.scored(block, vec - centre, self.dim, lambda pos: self.rows(slots[pos]) @ vec)
        if slots.size * 2 >= hi - lo:
            span = self._span_dot(lo, hi, vec)
            return span if run else span[slots - lo]
        return self.rows(slots) @ vec

    def _coded(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows' sign codes and their centre, made the first time a search needs them (the
        centre then is the mean of the rows on the pages kept, at least SHORTLIST_FROM of them;
        the rows added after it are coded around it as they come)."""
        if self.signs is None or self.centre is None:
            kept = [(a, b) for a, b in self._spans(0, self.used) if self._pages[a // PAGE] is not None]
            total = np.zeros(self.dim, dtype=np.float64)
            for a, b in kept:
                total += self._pages[a // PAGE][: b - a].sum(axis=0, dtype=np.float64)  # type: ignore[index]
            self.centre = (total / max(1, sum(b - a for a, b in kept))).astype(np.float32)
            self.signs = np.zeros((signs.words(self.dim), max(self.used, 1)), dtype=np.uint64)
            for a, b in kept:
                page = self._pages[a // PAGE]
                assert page is not None
                for i in range(a, b, 2_048):
                    j = min(b, i + 2_048)
                    self.signs[:, i:j] = signs.codes(page[i - a : j - a] - self.centre)
        return self.signs, self.centre
