"""One term's postings for the keyword index (`store/bm25.py`): parallel arrays, written a slice
at a time, retired by generation, compacted, and a champion list for very common terms."""

from __future__ import annotations

import numpy as np

TF_MAX = 255  # a term's count in one row is kept as uint8: BM25's weight has all but saturated by then
GEN_MASK = 0xFFFF  # a posting keeps its row's generation as uint16 (`KeywordIndex` purges before one wraps)
GEN = np.uint16  # a posting's generation (GEN_MASK of its row's)
TF = np.uint8  # a posting's term frequency (at most TF_MAX)
GROW_SLOWLY_FROM = 64  # entries past which an array grows by an eighth, not double
# Postings an ingest adds wait in arrival order, up to this many, before they are written into
# their terms' arrays (`PostingsTable.add`); any read writes them first.
FOLD_AT = 1 << 19


class Postings:
    """One term's postings: parallel arrays of label, the label's generation when it was added (its
    low 16 bits), and the term's frequency there (uint8); 7 bytes a posting where a dict entry
    costs about 100. A removed row's postings stay until the term is compacted (its generation no
    longer matches).

    A term's arrays double while small and grow by an eighth past GROW_SLOWLY_FROM entries:
    doubling left a term's arrays a third empty on average, and by a quarter from 4,096 entries
    still 29 % of all postings' room at 100,000 section rows of Zipf text (923 bytes a row, 791 by
    an eighth from 64, the fill no slower: each growth is a memcpy)."""

    __slots__ = ("labels", "gens", "tfs", "n", "live", "compactions", "champ", "champ_upto", "champ_epoch")

    def __init__(self) -> None:
        self.labels = np.empty(2, dtype=np.int32)
        self.gens = np.empty(2, dtype=GEN)
        self.tfs = np.empty(2, dtype=TF)
        self.n = 0  # entries used
        self.live = 0  # entries whose row still holds the term: the document frequency
        self.compactions = 0  # entries move when compacted: a champion list from before is stale
        self.champ: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # labels, gens, tfs
        self.champ_upto = 0  # entries the champion list was chosen from
        self.champ_epoch = 0

    def extend(self, labels: np.ndarray, gens: np.ndarray, tfs: np.ndarray) -> None:
        """Postings of several rows at once: one slice written per array, not a scalar per posting."""
        m = labels.shape[0]
        if self.n + m > self.labels.shape[0]:
            cap = max(self.n + m, self.n + (self.n // 8 if self.n >= GROW_SLOWLY_FROM else self.n))
            for name in ("labels", "gens", "tfs"):
                old = getattr(self, name)
                grown = np.empty(cap, dtype=old.dtype)
                grown[: self.n] = old[: self.n]
                setattr(self, name, grown)
        self.labels[self.n : self.n + m] = labels
        self.gens[self.n : self.n + m] = gens
        self.tfs[self.n : self.n + m] = tfs
        self.n += m
        self.live += m

    def current(self, gen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(labels, tfs) of the rows that hold the term now."""
        labels, tfs = self.labels[: self.n], self.tfs[: self.n]
        if self.live == self.n:
            return labels, tfs
        ok = self.gens[: self.n] == gen[labels]
        return labels[ok], tfs[ok]

    def compact(self, gen: np.ndarray, drop: int = -1) -> None:
        """Keep the postings of rows that hold the term now; with `drop`, none of that label's."""
        ok = self.gens[: self.n] == gen[self.labels[: self.n]]
        if drop >= 0:
            ok &= self.labels[: self.n] != drop
        keep = int(ok.sum())
        self.labels[:keep] = self.labels[: self.n][ok]
        self.gens[:keep] = self.gens[: self.n][ok]
        self.tfs[:keep] = self.tfs[: self.n][ok]
        self.n = keep
        self.compactions += 1

    def champions(self, gen: np.ndarray, dl: np.ndarray, avgdl: float, k1: float, b: float,
                  size: int) -> tuple[np.ndarray, np.ndarray]:
        """(labels, tfs) of the term's champion list (its `size` rows of highest BM25 weight under
        `k1` and `b`) plus the entries added since it was chosen, rows that changed since left out;
        chosen again once the additions reach `size`."""
        if self.champ is None or self.champ_epoch != self.compactions or self.n - self.champ_upto > size:
            labels, tfs = self.labels[: self.n], self.tfs[: self.n]
            weight = tfs / (tfs + k1 * (1 - b + b * dl[labels] / avgdl))
            top = np.argpartition(-weight, size)[:size]
            top = top[self.gens[top] == gen[labels[top]]]
            self.champ = (labels[top].copy(), self.gens[top].copy(), tfs[top].copy())
            self.champ_upto, self.champ_epoch = self.n, self.compactions
            return self.champ[0], self.champ[2]
        labels, gens, tfs = self.champ
        new = slice(self.champ_upto, self.n)
        labels = np.concatenate((labels, self.labels[new]))
        gens = np.concatenate((gens, self.gens[new]))
        tfs = np.concatenate((tfs, self.tfs[new]))
        ok = gens == gen[labels]
        return labels[ok], tfs[ok]


_NO_LABELS = np.zeros(0, dtype=np.int32)
_NO_GENS = np.zeros(0, dtype=GEN)
_NO_TFS = np.zeros(0, dtype=TF)


class PostingsTable:
    """Every term's postings by term id. A term's postings start as a range of arrays shared by
    many terms and get a `Postings` of their own (`__getitem__`) when a later write, a removal or a
    champion list first needs one; a search and a document frequency read the range (`current`,
    `live`): a million rows of real text hold about a million terms, most of them in
    one row (an identifier, a code), and a `Postings` with three arrays costs about 0.5 KB a term
    (at load, 11-15 s of a million-row cold start) for terms most of which no search or later
    write ever touches.

    Two runs of ranges: the terms a snapshot held (its concatenated arrays, fixed) and, after them,
    the terms written since, in the order they were first written (the tail, grown as the index
    is). A term is written there whole by its first write (`extend`), so each range follows the
    one before and one offset a term places it.

    An ingest's postings wait (`add`): a term's are written a slice per call, and in 256-row
    batches of Zipf text (as a replica applies while following the stream) the frequent terms
    were written once per batch, a third of filling the keyword index. Waiting batches are
    written together, each term once for all of them, when FOLD_AT postings wait or when anything
    reads the table (`_settle`): a search during an ingest writes what arrived since the last
    one, as it did."""

    __slots__ = ("_items", "_off", "_labels", "_born", "_tfs", "_live",
                 "_toff", "_tn", "_tlabels", "_tgens", "_ttfs", "_wait", "_waiting")

    def __init__(self) -> None:
        self._items: list[Postings | None] = []
        self._off = np.zeros(1, dtype=np.int64)  # the loaded terms' ranges (none loaded: one offset)
        self._labels = np.zeros(0, dtype=np.int32)
        # The loaded postings' generations: every one was its row's when the snapshot was written,
        # so one a label (2 bytes a row) stands for one a posting (2 bytes each, 86 of them a row
        # of 100 words); a posting's is read as its label's (`_loaded_gens`).
        self._born = np.zeros(0, dtype=GEN)
        self._tfs = np.zeros(0, dtype=TF)
        self._live = np.zeros(0, dtype=np.int64)
        # The tail: ranges of terms written since, `_toff[i]:_toff[i + 1]` for the i-th after the
        # loaded ones; `_tn` of them written so far.
        self._toff = np.zeros(1024, dtype=np.int64)
        self._tn = 0
        self._tlabels = np.zeros(1024, dtype=np.int32)
        self._tgens = np.zeros(1024, dtype=GEN)
        self._ttfs = np.zeros(1024, dtype=TF)
        self._wait: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (tids, labels, gens, tfs)
        self._waiting = 0

    @classmethod
    def loaded(cls, off: np.ndarray, labels: np.ndarray, born: np.ndarray, tfs: np.ndarray,
               live: np.ndarray) -> PostingsTable:
        """Terms 0..len(off)-2 as ranges `off[t]:off[t+1]` of the arrays; `born` each label's
        generation when they were written (every posting then its row's), `live` the terms'
        document frequencies. Nothing here reads the labels: mapped, they stay on disk until a
        search or a write needs a term's."""
        table = cls()
        table._items = [None] * (off.size - 1)
        table._off, table._labels, table._born, table._tfs, table._live = off, labels, born, tfs, live
        return table

    @property
    def loaded_terms(self) -> int:
        """Terms read as ranges of a snapshot's arrays (0 for a table built in memory)."""
        return self._off.size - 1

    def _loaded_gens(self, labels: np.ndarray) -> np.ndarray:
        """The generations of loaded postings (theirs are their labels' at load)."""
        return self._born[labels]

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, tid: int) -> Postings:
        self._settle()
        p = self._items[tid]
        if p is None:
            p = self._items[tid] = self._made(tid)
        return p

    def purge(self, label: int, tids: np.ndarray, gen: np.ndarray) -> None:
        """Every posting of `label` gone, before its generation wraps round to where one of its
        retired postings was written (`KeywordIndex` bumps it; a posting keeps 16 bits of it): its
        current postings (in the terms `tids`, made first if still ranges) and its retired ones
        (only in made terms with retired postings: a term's first retirement makes it), with every
        other row's retired ones in those terms. The terms' document frequencies still count the
        row (the caller lowers them). Once in 65,536 rewrites of one row, a pass over the terms."""
        self._settle()
        mine = set(tids.tolist())
        for tid in mine:
            self[tid].compact(gen, drop=label)
        for tid, p in enumerate(self._items):
            if p is not None and p.n != p.live and tid not in mine:
                p.compact(gen, drop=label)

    def new_term(self) -> int:
        """A term id for a term not seen before; its postings come with its first `extend`."""
        self._items.append(None)
        return len(self._items) - 1

    def add(self, tids: np.ndarray, labels: np.ndarray, gens: np.ndarray, tfs: np.ndarray) -> None:
        """Postings of many terms in arrival order (parallel arrays), to be written with the
        batches waiting beside them: every term of a batch has its id already (`new_term`)."""
        if tids.size:
            self._wait.append((tids, labels, gens, tfs))
            self._waiting += tids.size
            if self._waiting >= FOLD_AT:
                self._settle()

    def _settle(self) -> None:
        """Write the waiting postings into their terms, each term's in arrival order. New terms
        are written in id order, which is the order of their first write, as the tail needs."""
        if not self._wait:
            return
        wait, self._wait, self._waiting = self._wait, [], 0
        tid = np.concatenate([w[0] for w in wait]).astype(np.int64, copy=False)
        order = np.argsort(tid, kind="stable")
        tid = tid[order]
        lab, gen, tf = (np.concatenate([w[i] for w in wait])[order] for i in (1, 2, 3))
        cuts = np.flatnonzero(tid[1:] != tid[:-1]) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), tid.size]
        for lo, hi, t in zip(starts, ends, tid[starts].tolist(), strict=True):
            self.extend(t, lab[lo:hi], gen[lo:hi], tf[lo:hi])

    def extend(self, tid: int, labels: np.ndarray, gens: np.ndarray, tfs: np.ndarray) -> None:
        """Postings of several rows for one term: a term's first write is a range of the tail."""
        self._settle()
        if self._items[tid] is not None or tid != self._off.size - 1 + self._tn:
            self[tid].extend(labels, gens, tfs)
            return
        lo, m = int(self._toff[self._tn]), labels.shape[0]
        if lo + m > self._tlabels.shape[0]:
            cap = max(lo + m, 2 * self._tlabels.shape[0])
            self._tlabels, self._tgens, self._ttfs = (
                np.concatenate((a[:lo], np.zeros(cap - lo, dtype=a.dtype)))
                for a in (self._tlabels, self._tgens, self._ttfs))
        if self._tn + 2 > self._toff.shape[0]:
            self._toff = np.concatenate((self._toff, np.zeros(self._toff.shape[0], dtype=np.int64)))
        self._tlabels[lo : lo + m] = labels
        self._tgens[lo : lo + m] = gens
        self._ttfs[lo : lo + m] = tfs
        self._tn += 1
        self._toff[self._tn] = lo + m

    def frequent(self, low: int, high: int) -> list[int]:
        """The terms whose document frequency is above `low` and at most `high`, without making
        their `Postings`: the loaded ranges' and the tail's counts as arrays, then the made terms."""
        self._settle()
        base = self._off.size - 1
        loaded = (self._live > low) & (self._live <= high)
        tail = np.diff(self._toff[: self._tn + 1])
        out = {*np.flatnonzero(loaded).tolist(), *(np.flatnonzero((tail > low) & (tail <= high)) + base).tolist()}
        for tid, p in enumerate(self._items):
            if p is not None:
                if low < p.live <= high:
                    out.add(tid)
                else:
                    out.discard(tid)
        return sorted(out)

    def live(self, tid: int) -> int:
        """The term's document frequency, without making its `Postings`."""
        self._settle()
        p = self._items[tid]
        if p is not None:
            return p.live
        base = self._off.size - 1
        if tid < base:
            return int(self._live[tid])
        i = tid - base
        return int(self._toff[i + 1] - self._toff[i]) if i < self._tn else 0

    def current(self, tid: int, gen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(labels, tfs) of the rows that hold the term now, without making its `Postings` (views:
        the caller copies what it keeps)."""
        self._settle()
        p = self._items[tid]
        if p is not None:
            return p.current(gen)
        if tid < self._off.size - 1:  # a loaded range: its generations worked out only if some are stale
            lo, hi = int(self._off[tid]), int(self._off[tid + 1])
            labels, tfs = self._labels[lo:hi], self._tfs[lo:hi]
            if self._live[tid] == hi - lo:
                return labels, tfs
            ok = self._loaded_gens(labels) == gen[labels]
            return labels[ok], tfs[ok]
        ((labels, gens, tfs),) = self._unmade(tid, tid + 1) or ((_NO_LABELS, _NO_GENS, _NO_TFS),)
        if self.live(tid) == labels.shape[0]:
            return labels, tfs
        ok = gens == gen[labels]
        return labels[ok], tfs[ok]

    def _made(self, tid: int) -> Postings:
        p = Postings()
        base = self._off.size - 1
        if tid < base:
            lo, hi = int(self._off[tid]), int(self._off[tid + 1])
            if hi > lo:  # views, not copies: a term's first append outgrows its view and moves it to its own array
                p.labels, p.tfs = self._labels[lo:hi], self._tfs[lo:hi]
                p.gens = self._loaded_gens(p.labels)
            p.n, p.live = hi - lo, int(self._live[tid])
        elif (i := tid - base) < self._tn:  # copies: the tail's arrays are replaced as they grow
            lo, hi = int(self._toff[i]), int(self._toff[i + 1])
            p.labels, p.gens, p.tfs = self._tlabels[lo:hi].copy(), self._tgens[lo:hi].copy(), self._ttfs[lo:hi].copy()
            p.n = p.live = hi - lo  # a tail term is made before any of its rows is removed
        return p

    def _unmade(self, first: int, end: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The postings of terms first..end-1, none of them made: a slice of the loaded arrays and
        one of the tail (terms past the tail's have none)."""
        base = self._off.size - 1
        out = []
        if first < base:
            lo, hi = self._off[first], self._off[min(end, base)]
            labels = self._labels[lo:hi]
            out.append((labels, self._loaded_gens(labels), self._tfs[lo:hi]))
        a, b = max(first, base) - base, min(end - base, self._tn)
        if a < b:
            lo, hi = self._toff[a], self._toff[b]
            out.append((self._tlabels[lo:hi], self._tgens[lo:hi], self._ttfs[lo:hi]))
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(entries per term, labels, generations, frequencies) of every term in id order, as one
        concatenation: a run of terms never made is a slice of the loaded arrays or the tail."""
        self._settle()
        base = self._off.size - 1
        counts = np.zeros(len(self._items), dtype=np.int64)
        counts[:base] = np.diff(self._off)
        counts[base : base + self._tn] = np.diff(self._toff[: self._tn + 1])
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        run = 0  # the first term of the run of unmade ones not yet taken
        for tid, p in enumerate(self._items):
            if p is None:
                continue
            parts += self._unmade(run, tid)
            parts.append((p.labels[: p.n], p.gens[: p.n], p.tfs[: p.n]))
            counts[tid] = p.n
            run = tid + 1
        parts += self._unmade(run, len(self._items))
        if not parts:
            return counts, np.zeros(0, np.int32), np.zeros(0, GEN), np.zeros(0, TF)
        return (counts, np.concatenate([a for a, _, _ in parts]), np.concatenate([g for _, g, _ in parts]),
                np.concatenate([t for _, _, t in parts]))
