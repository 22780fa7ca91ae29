"""The vector index: rows of every account with an hnswlib graph and exact numpy search.

Which engine answers depends on how many rows a query may touch: a selective scope (a
subtree, a level, a context type) is scored exactly with one matrix product over just those
rows, while a broad scope asks hnswlib and post-filters, over-fetching by the scope's
selectivity. A selective hnswlib filter would be 8-45x slower than brute force over the
allowed rows (NATS-NOTES.md), so it is never used.

Scopes are URI prefixes. Rows are kept in a sorted list of `account NUL uri/` keys, so the
rows under a prefix are one contiguous slice found by bisection, and accounts can never see
each other's rows.

Why one module: every method reads or writes the same few private structures (the row and vector
arrays, the sorted key list, the hnswlib graph, the label maps) under one lock; split apart, each
piece would have to reach into the others' internals.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import logging
import math
import os
import shutil
import threading
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hnswlib
import msgspec
import numpy as np

from skald.messages.index import IndexRow
from skald.store.bm25 import KeywordIndex
from skald.store.language import DEFAULT

log = logging.getLogger(__name__)

BRUTE_FORCE_MAX = 8_000  # rows; below this an exact matrix product beats the graph walk
SMALL_INDEX = 2_000  # the whole index is scored exactly while it is this small
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 64  # recall@10 ~0.998 at 100k clustered rows (NATS-NOTES.md)
CONTEXT_TYPES = ("resource", "memory", "skill")


def _digest(key: str, row: IndexRow) -> int:
    """What `content_hash` holds of one row: its key, content and time, 128 bits."""
    h = hashlib.blake2b(f"{key}\x00{row.content_hash}\x00{row.updated_at!r}".encode(), digest_size=16)
    return int.from_bytes(h.digest(), "big")


def row_key(account: str, uri: str, level: int) -> str:
    return f"{account}\x00{uri}\x00{level}"


def _sort_key(account: str, uri: str) -> str:
    """A section (`<doc>#<anchor>`) sorts, and scopes, inside its document's subtree."""
    return f"{account}\x00{uri.replace('#', '/')}/"


def row_subject_token(account: str, uri: str, level: int) -> str:
    """A NATS-safe token naming one row (its subject on the index stream)."""
    return hashlib.sha1(row_key(account, uri, level).encode()).hexdigest()


@dataclass(slots=True)
class Query:
    """Everything a search may restrict; `None` means unrestricted."""

    account: str
    prefixes: list[str] | None = None  # canonical viking:// URIs (directories or files)
    levels: frozenset[int] | None = None
    context_types: frozenset[str] | None = None
    since: float | None = None
    until: float | None = None
    time_field: str = "updated_at"
    predicate: Callable[[IndexRow], bool] | None = None  # tags, metadata filter, ...


@dataclass(slots=True)
class Hit:
    row: IndexRow
    score: float
    keep: bool = True  # passes the caller's collection filter (search_children_many with `collect`)
    gate: float | None = None  # what a threshold compares, when not the score (hybrid: strong keyword evidence only)
    label: int = -1  # the row's slot in this index (-1: not known), so callers need no key lookup
    novelty: float = 0.0  # what the query's best hit must clear its threshold by to answer at all (hybrid)


@dataclass(slots=True)
class SearchTrace:
    engine: str
    scope_rows: int
    examined: int


SNAPSHOT_FILES = ("vectors.npy", "rows.msgpack", "graph.bin", "foreign.msgpack")  # the last: since 2026-12


def _crc32(path: Path) -> int:
    """CRC-32 of a snapshot file, read in pieces (a 100k-row snapshot is ~150 MB)."""
    crc = 0
    with open(path, "rb") as f:
        while piece := f.read(1 << 22):
            crc = zlib.crc32(piece, crc)
    return crc


class VectorIndex:
    """Thread-safe for one writer and many readers through a single lock (writes are short)."""

    def __init__(self, dim: int, model: str = "", capacity: int = 1024) -> None:
        self.dim = dim
        self.model = model
        self._lock = threading.RLock()
        self._labels: dict[str, int] = {}
        self._rows: list[IndexRow | None] = []
        self._skeys: list[str] = []  # each row's `_sort_key` (its scope key), "" for a free slot
        self._vecs = np.zeros((capacity, dim), dtype=np.float32)
        self._level = np.zeros(capacity, dtype=np.int8)
        self._ctype = np.zeros(capacity, dtype=np.int8)
        self._updated = np.zeros(capacity, dtype=np.float64)
        self._created = np.zeros(capacity, dtype=np.float64)
        self._alive = np.zeros(capacity, dtype=bool)
        self._tlen = np.zeros(capacity, dtype=np.int32)  # characters of each row's text (hybrid's length margin)
        self._mix: Counter[tuple[int, int]] = Counter()  # live rows per (level, context type code)
        # Added to every score of a leaf row: minus its hubness (see `set_querybank`); zero without one.
        self._adj = np.zeros(capacity, dtype=np.float32)
        self._bank: np.ndarray | None = None
        self._bank_beta, self._bank_k = 0.0, 5
        self._adj_sum: dict[str, float] = {}  # per account: the sum of its leaves' _adj, and their number
        self._adj_n: dict[str, int] = {}
        self._sorted_keys: list[str] = []
        self._sorted_labels: list[int] = []
        self._free: list[int] = []
        # Labels whose vectors wait for the graph, with a version so a row re-upserted while the
        # builder works stays pending. The graph has its own lock: the builder inserts without
        # holding the index lock (graph inserts are slow; upserts and exact searches go on).
        self._pending: dict[int, int] = {}
        self._pending_v = 0
        self._graph_lock = threading.Lock()
        # While a snapshot writes the graph (`save`), nothing changes it: new vectors wait in
        # `_pending` (scored exactly), deletes wait here, and searches go on.
        self._saving = False
        self._save_lock = threading.Lock()  # one snapshot at a time (a stopping replica saves too)
        self._unsaved_deletes: list[tuple[int, bool]] = []  # (label, whether the graph holds it)
        self._children: dict[str, set[int]] = {}  # `account NUL parent_uri` -> labels of its children
        self._children_arr: dict[str, np.ndarray] = {}  # the same as arrays, built on first use
        self._children_mat: dict[str, np.ndarray] = {}  # their vectors, gathered once per change
        self._by_level: dict[int, set[int]] = {0: set(), 1: set(), 2: set()}
        self._level_arr: dict[frozenset[int], np.ndarray] = {}
        self._level_mat: dict[frozenset[int], np.ndarray] = {}  # vectors of those rows, gathered once
        self._live = 0
        self._chash = 0  # XOR of every live row's digest (`_digest`): `content_hash` without a scan
        # Rows whose latest write came from another embedder (key -> its name): not searchable
        # here, counted until this embedder writes or deletes them (`content.reindex`).
        self.foreign: dict[str, str] = {}
        self.keywords = KeywordIndex()
        self._graph = hnswlib.Index(space="ip", dim=dim)
        self._graph.init_index(max_elements=capacity, ef_construction=HNSW_EF_CONSTRUCTION, M=HNSW_M)
        self._graph.set_ef(HNSW_EF_SEARCH)
        self.applied_seq = 0

    # ----- writes -----------------------------------------------------------------

    def __len__(self) -> int:
        return self._live

    def _grow(self, need: int) -> None:
        cap = self._vecs.shape[0]
        if need <= cap:
            return
        new = max(need, cap * 2)
        for name in ("_vecs", "_level", "_ctype", "_updated", "_created", "_alive", "_adj", "_tlen"):
            old = getattr(self, name)
            arr = np.zeros((new, *old.shape[1:]), dtype=old.dtype)
            arr[: old.shape[0]] = old
            setattr(self, name, arr)

    def _fit_graph(self) -> None:
        """The graph's capacity brought up to the arrays' (under the graph lock, before an add):
        growing it in `_grow` would wait, holding the index lock, for a snapshot writing the graph."""
        if self._graph.get_max_elements() < self._vecs.shape[0]:
            self._graph.resize_index(self._vecs.shape[0])

    def upsert_many(self, rows: Iterable[tuple[IndexRow, np.ndarray]], defer_graph: bool = False) -> int:
        """Insert or replace rows. With `defer_graph` (a replica catching up on a long tail) the
        rows are searchable at once, exactly, and join the HNSW graph later (`build_graph`):
        graph inserts cost ~1.6k/s, the rest of an upsert far less."""
        items = list(rows)
        if not items:
            return 0
        with self._lock:
            labels: list[int] = []
            vecs: list[np.ndarray] = []
            forgotten: set[int] = set()
            for row, vec in items:
                if vec.shape != (self.dim,):
                    raise ValueError(f"vector of dim {vec.shape} for an index of dim {self.dim}")
                key = row_key(row.account, row.uri, row.level)
                if self.foreign:
                    self.foreign.pop(key, None)
                label = self._labels.get(key)
                if label is not None and label not in forgotten:
                    self._forget_adj(label)  # its old contribution to the account's centre
                    forgotten.add(label)
                if label is None:
                    label = self._free.pop() if self._free else len(self._rows)
                    if label == len(self._rows):
                        self._rows.append(None)
                        self._skeys.append("")
                    self._grow(label + 1)
                    self._labels[key] = label
                    forgotten.add(label)  # new: nothing counted yet, even if it comes again in this batch
                    sk = _sort_key(row.account, row.uri)
                    self._skeys[label] = sk
                    pos = bisect.bisect_right(self._sorted_keys, sk)
                    self._sorted_keys.insert(pos, sk)
                    self._sorted_labels.insert(pos, label)
                    self._live += 1
                old = self._rows[label]
                if old is not None and old.parent_uri != row.parent_uri:
                    self._children.get(f"{old.account}\x00{old.parent_uri}", set()).discard(label)
                    self._children_arr.pop(f"{old.account}\x00{old.parent_uri}", None)
                    self._children_mat.pop(f"{old.account}\x00{old.parent_uri}", None)
                pkey = f"{row.account}\x00{row.parent_uri}"
                self._children_mat.pop(pkey, None)
                kids = self._children.setdefault(pkey, set())
                if label not in kids:
                    kids.add(label)
                    self._children_arr.pop(pkey, None)
                if row.vector:  # the vector lives in `_vecs`; a second copy per row doubles memory and snapshots
                    row = msgspec.structs.replace(row, vector=b"")
                if old is not None:
                    self._chash ^= _digest(key, old)
                self._chash ^= _digest(key, row)
                self._rows[label] = row
                if row.level != 2 or (old is not None and old.level != 2):
                    self._level_mat.clear()
                if old is not None and old.level != row.level:
                    self._by_level.get(old.level, set()).discard(label)
                if label not in self._by_level.setdefault(row.level, set()):
                    self._by_level[row.level].add(label)
                    self._level_arr.clear()
                    self._level_mat.clear()
                self.keywords.add(label, row.text or row.abstract, row.lang or DEFAULT)
                self._vecs[label] = vec
                self._tlen[label] = len(row.text)
                if self._alive[label]:
                    self._mix[(int(self._level[label]), int(self._ctype[label]))] -= 1
                self._level[label] = row.level
                self._ctype[label] = CONTEXT_TYPES.index(row.context_type) if row.context_type in CONTEXT_TYPES else -1
                self._mix[(row.level, int(self._ctype[label]))] += 1
                self._updated[label] = row.updated_at
                self._created[label] = row.created_at
                self._alive[label] = True
                labels.append(label)
                vecs.append(vec)
            # Dedup within the batch: the last vector for a label wins.
            last: dict[int, np.ndarray] = dict(zip(labels, vecs, strict=True))
            lab = np.fromiter(last.keys(), dtype=np.int64, count=len(last))
            mat = np.stack(list(last.values())).astype(np.float32, copy=False)
            self._adj[lab] = self._hub_adjust(mat, self._level[lab])
            for label in lab.tolist():
                self._count_adj(label)
            if defer_graph or self._pending or self._saving:
                self._pending_v += 1
                self._pending.update(dict.fromkeys(lab.tolist(), self._pending_v))
                return len(items)
            # hnswlib un-deletes a reused label on add (a freed label may come back).
            with self._graph_lock:
                self._fit_graph()
                self._graph.add_items(mat, lab, num_threads=1)
            return len(items)

    def set_querybank(self, bank: np.ndarray | None, beta: float, k: int = 5) -> None:
        """Hubness correction (query-bank normalisation): a leaf row close to many generic questions
        (small talk, boilerplate) sits close to every query, unrelated ones included. Each leaf's
        score is lowered by `beta` x its mean similarity to its `k` nearest questions of `bank`,
        relative to the mean of that over its account's leaves (so a corpus as a whole is not
        moved, only its hubs against its other rows). Computed once per row from its own vector:
        the same on every replica. Summary rows are left alone."""
        with self._lock:
            self._bank = None if bank is None or beta == 0.0 else np.asarray(bank, dtype=np.float32)
            self._bank_beta, self._bank_k = beta, k
            self._adj[:] = 0.0
            self._adj_sum.clear()
            self._adj_n.clear()
            alive = np.flatnonzero(self._alive[: len(self._rows)])
            for i in range(0, alive.size, 4096):
                part = alive[i : i + 4096]
                self._adj[part] = self._hub_adjust(self._vecs[part], self._level[part])
            for label in alive.tolist():
                self._count_adj(label)

    def _hub_adjust(self, mat: np.ndarray, levels: np.ndarray) -> np.ndarray:
        if self._bank is None or mat.shape[0] == 0:
            return np.zeros(mat.shape[0], dtype=np.float32)
        sims = mat @ self._bank.T
        k = min(self._bank_k, sims.shape[1])
        hub = np.partition(sims, sims.shape[1] - k, axis=1)[:, -k:].mean(axis=1)
        return np.where(levels == 2, -self._bank_beta * hub, 0.0).astype(np.float32)

    def _count_adj(self, label: int) -> None:
        row = self._rows[label]
        if row is not None and row.level == 2 and self._bank is not None:
            self._adj_sum[row.account] = self._adj_sum.get(row.account, 0.0) + float(self._adj[label])
            self._adj_n[row.account] = self._adj_n.get(row.account, 0) + 1

    def _forget_adj(self, label: int) -> None:
        row = self._rows[label]
        if row is not None and row.level == 2 and self._bank is not None and self._alive[label]:
            self._adj_sum[row.account] = self._adj_sum.get(row.account, 0.0) - float(self._adj[label])
            self._adj_n[row.account] = self._adj_n.get(row.account, 1) - 1

    def _adjust(self, labels: np.ndarray, account: str) -> np.ndarray:
        """What the hubness correction adds to these rows' cosines (zeros without a query bank)."""
        if self._bank is None:
            return self._adj[labels]
        n = self._adj_n.get(account, 0)
        centre = -self._adj_sum.get(account, 0.0) / n if n else 0.0
        return self._adj[labels] + np.float32(centre) * (self._level[labels] == 2)

    @property
    def pending_graph(self) -> int:
        return len(self._pending)

    def build_graph(self, max_items: int = 4096, threads: int = 2) -> int:
        """Move up to `max_items` deferred rows into the graph; returns how many remain. Only
        the graph lock is held while inserting, so the index keeps taking upserts and answering
        (exactly) meanwhile; the rows leave the pending set once they are in the graph."""
        with self._lock:
            if self._saving:  # the graph is being written: the snapshot's end builds what waits
                return 0
            take = list(self._pending.items())[:max_items]
            alive = [lab for lab, _ in take if self._alive[lab]]
            mat = self._vecs[alive].astype(np.float32, copy=True) if alive else None
        if mat is not None:
            with self._graph_lock:
                self._fit_graph()
                self._graph.add_items(mat, np.asarray(alive, dtype=np.int64), num_threads=threads)
        with self._lock:
            for lab, version in take:
                if self._pending.get(lab) == version:
                    del self._pending[lab]
            return len(self._pending)

    def note_foreign(self, account: str, uri: str, level: int, model: str) -> None:
        """A row another embedder wrote: counted (`foreign`), never searched."""
        with self._lock:
            self.foreign[row_key(account, uri, level)] = model

    def delete(self, account: str, uri: str, level: int) -> bool:
        with self._lock:
            key = row_key(account, uri, level)
            if self.foreign:
                self.foreign.pop(key, None)
            label = self._labels.pop(key, None)
            if label is None:
                return False
            sk = _sort_key(account, uri)
            lo = bisect.bisect_left(self._sorted_keys, sk)
            hi = bisect.bisect_right(self._sorted_keys, sk)
            for i in range(lo, hi):
                if self._sorted_labels[i] == label:
                    del self._sorted_keys[i]
                    del self._sorted_labels[i]
                    break
            old = self._rows[label]
            if old is not None:
                kids = self._children.get(f"{old.account}\x00{old.parent_uri}")
                self._children_arr.pop(f"{old.account}\x00{old.parent_uri}", None)
                self._children_mat.pop(f"{old.account}\x00{old.parent_uri}", None)
                if kids is not None:
                    kids.discard(label)
                    if not kids:
                        del self._children[f"{old.account}\x00{old.parent_uri}"]
            if old is not None:
                self._by_level.get(old.level, set()).discard(label)
                self._level_arr.clear()
                self._level_mat.clear()
            self._forget_adj(label)
            if old is not None:
                self._chash ^= _digest(key, old)
            self._rows[label] = None
            self._skeys[label] = ""
            self.keywords.remove(label)
            if self._alive[label]:
                self._mix[(int(self._level[label]), int(self._ctype[label]))] -= 1
            self._alive[label] = False
            in_graph = self._pending.pop(label, None) is None
            if self._saving:  # the graph is being written: marked, and the label freed, after it
                self._unsaved_deletes.append((label, in_graph))
            else:
                if in_graph:
                    with self._graph_lock, contextlib.suppress(RuntimeError):
                        self._graph.mark_deleted(label)
                self._free.append(label)
            self._live -= 1
            return True

    def live_rows(self) -> list[IndexRow]:
        with self._lock:
            return [r for r in self._rows if r is not None]

    def get(self, account: str, uri: str, level: int) -> IndexRow | None:
        label = self._labels.get(row_key(account, uri, level))
        return None if label is None else self._rows[label]

    # ----- reads ------------------------------------------------------------------

    @staticmethod
    def _starts(account: str, prefixes: list[str] | None) -> tuple[str, ...]:
        """The scope keys a query's rows start with: the account, or its prefixes' subtrees."""
        if prefixes is None:
            return (f"{account}\x00",)
        starts = [_sort_key(account, p.rstrip("/")) for p in prefixes]
        # A root-level prefix ("viking://") covers the account.
        return tuple(sorted({f"{account}\x00" if s.endswith("\x00viking:///") else s for s in starts}))

    def _ranges(self, account: str, prefixes: list[str] | None) -> list[tuple[int, int]]:
        spans = []
        for s in self._starts(account, prefixes):
            lo = bisect.bisect_left(self._sorted_keys, s)
            hi = bisect.bisect_left(self._sorted_keys, s + "\U0010ffff")
            if hi > lo:
                spans.append((lo, hi))
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return merged

    def _scope_labels(self, account: str, prefixes: list[str] | None) -> list[int]:
        out: list[int] = []
        for lo, hi in self._ranges(account, prefixes):
            out.extend(self._sorted_labels[lo:hi])
        return out

    def _in_scope(self, row: IndexRow, account: str, prefixes: list[str] | None) -> bool:
        return _sort_key(row.account, row.uri).startswith(self._starts(account, prefixes))

    def _allow_many(self, labels: np.ndarray, q: Query) -> np.ndarray:
        """`allows` for many labels at once: the numeric filters as array operations, then scope
        (one `startswith` over the scope keys) and the predicate for the rows still standing."""
        ok = self._mask(labels, q)
        starts = self._starts(q.account, q.prefixes)
        skeys, rows, pred = self._skeys, self._rows, q.predicate
        for i in np.flatnonzero(ok).tolist():
            label = int(labels[i])
            if not skeys[label].startswith(starts) or (pred is not None and not pred(rows[label])):  # type: ignore[arg-type]
                ok[i] = False
        return ok

    @staticmethod
    def _member(values: np.ndarray, wanted: Iterable[int]) -> np.ndarray:
        """`values in wanted` for a handful of codes (np.isin costs ~50 us even for tiny sets)."""
        out = np.zeros(values.shape, dtype=bool)
        for w in wanted:
            out |= values == w
        return out

    def _mask(self, labels: np.ndarray, q: Query) -> np.ndarray:
        m = self._alive[labels]
        if q.levels is not None:
            m &= self._member(self._level[labels], q.levels)
        if q.context_types is not None:
            codes = [CONTEXT_TYPES.index(c) for c in q.context_types if c in CONTEXT_TYPES]
            m &= self._member(self._ctype[labels], codes)
        if q.since is not None or q.until is not None:
            t = (self._created if q.time_field == "created_at" else self._updated)[labels]
            if q.since is not None:
                m &= t >= q.since
            if q.until is not None:
                m &= t <= q.until
        return m

    def _selectivity(self, q: Query, scope_rows: int) -> float:
        total = max(1, self._live)
        frac = scope_rows / total
        if q.levels is not None or q.context_types is not None:
            codes = None if q.context_types is None else {CONTEXT_TYPES.index(c) for c in q.context_types
                                                           if c in CONTEXT_TYPES}
            match = sum(n for (lv, ct), n in self._mix.items()
                        if (q.levels is None or lv in q.levels) and (codes is None or ct in codes))
            frac *= max(match, 0) / max(self._live, 1)
        return frac

    def search(self, vec: np.ndarray, q: Query, k: int) -> tuple[list[Hit], SearchTrace]:
        """The k best rows by cosine similarity among those the query allows, best first."""
        with self._lock:
            if self._live == 0 or k <= 0:
                return [], SearchTrace("empty", 0, 0)
            scope_rows = sum(hi - lo for lo, hi in self._ranges(q.account, q.prefixes))
            if scope_rows == 0:
                return [], SearchTrace("empty", 0, 0)
            if self._live <= SMALL_INDEX or scope_rows <= BRUTE_FORCE_MAX:
                return self._exact(vec, q, k, scope_rows)
            if q.levels is not None and sum(len(self._by_level.get(lv, ())) for lv in q.levels) <= BRUTE_FORCE_MAX:
                return self._exact_levels(vec, q, k, scope_rows)
            sel = self._selectivity(q, scope_rows)
            if sel * self._live <= BRUTE_FORCE_MAX or len(self._pending) > BRUTE_FORCE_MAX:
                return self._exact(vec, q, k, scope_rows)  # exact while many rows still wait for the graph
            hits, trace = self._graph_search(vec, q, k, sel, scope_rows)
            if self._pending:  # rows written since the graph was last built: scored exactly beside it
                starts = self._starts(q.account, q.prefixes)
                waiting = np.fromiter((lab for lab in self._pending if self._skeys[lab].startswith(starts)),
                                      dtype=np.int64)
                if waiting.size:
                    # A waiting row the graph also returned was re-written: the graph's score is
                    # its old vector's, so the exact one replaces it.
                    more, _ = self._exact(vec, q, k, scope_rows, labels=waiting)
                    hits = sorted([*(h for h in hits if h.label not in self._pending), *more],
                                  key=lambda h: -h.score)[:k]
                    trace = SearchTrace("hnsw+pending", scope_rows, trace.examined + int(waiting.size))
            return hits, trace

    def _exact(self, vec: np.ndarray, q: Query, k: int, scope_rows: int,
               labels: np.ndarray | None = None) -> tuple[list[Hit], SearchTrace]:
        """The k best of the scope's rows (or of `labels`, already in scope), scored exactly."""
        if labels is None:
            labels = np.asarray(self._scope_labels(q.account, q.prefixes), dtype=np.int64)
        labels = labels[self._mask(labels, q)]
        if labels.size == 0:
            return [], SearchTrace("exact", scope_rows, 0)
        n = len(self._rows)
        if labels.size * 3 > n:  # most of the index: one product over the contiguous matrix beats gathering rows
            sims = (self._vecs[:n] @ vec)[labels]
        else:
            sims = self._vecs[labels] @ vec
        scores = sims + self._adjust(labels, q.account)
        hits: list[Hit] = []
        # Take candidates in score order; the predicate (tags, metadata) may reject some.
        want = k if q.predicate is None else min(labels.size, k * 4)
        while True:
            top = np.argpartition(-scores, want - 1)[:want] if want < labels.size else np.arange(labels.size)
            top = top[np.argsort(-scores[top], kind="stable")]
            hits = []
            for i in top.tolist():
                label = int(labels[i])
                row = self._rows[label]
                if row is None or (q.predicate is not None and not q.predicate(row)):
                    continue
                hits.append(Hit(row, float(scores[i]), label=label))
                if len(hits) >= k:
                    break
            if len(hits) >= k or want >= labels.size:
                return hits, SearchTrace("exact", scope_rows, int(labels.size))
            want = min(labels.size, want * 4)

    def _exact_levels(self, vec: np.ndarray, q: Query, k: int, scope_rows: int) -> tuple[list[Hit], SearchTrace]:
        """Directory-level searches (the descent's global step): few rows, scored exactly against a
        cached matrix, the scope checked per candidate in score order."""
        key = q.levels or frozenset()
        labels = self._level_arr.get(key)
        if labels is None:
            labels = np.fromiter(sorted(set().union(*(self._by_level.get(lv, set()) for lv in key))), dtype=np.int64)
            self._level_arr[key] = labels
        mat = self._level_mat.get(key)
        if mat is None or mat.shape[0] != labels.size:
            mat = self._vecs[labels]
            self._level_mat[key] = mat
        if labels.size == 0:
            return [], SearchTrace("exact-levels", scope_rows, 0)
        scores = mat @ vec + self._adjust(labels, q.account)
        ok = self._mask(labels, q)
        scores = np.where(ok, scores, -np.inf)
        starts = self._starts(q.account, q.prefixes)
        want = min(labels.size, max(k * 8, 64))
        while True:
            top = np.argpartition(-scores, want - 1)[:want] if want < labels.size else np.arange(labels.size)
            top = top[np.argsort(-scores[top], kind="stable")]
            hits: list[Hit] = []
            for i in top.tolist():
                sc = float(scores[i])
                if sc == -np.inf:
                    break
                label = int(labels[i])
                row = self._rows[label]
                if row is None or not self._skeys[label].startswith(starts):
                    continue
                if q.predicate is not None and not q.predicate(row):
                    continue
                hits.append(Hit(row, sc, label=label))
                if len(hits) >= k:
                    return hits, SearchTrace("exact-levels", scope_rows, int(labels.size))
            if want >= labels.size:
                return hits, SearchTrace("exact-levels", scope_rows, int(labels.size))
            want = min(labels.size, want * 8)

    def _graph_search(
        self, vec: np.ndarray, q: Query, k: int, sel: float, scope_rows: int
    ) -> tuple[list[Hit], SearchTrace]:
        # Half again what the filters are expected to leave: at 100k rows a page of 1.5k (not
        # 2k) costs 0.92 against 1.33 ms for k=150 and gives up 0.001 of the top 100's mean
        # cosine (the top 100 span 0.10); a page below ef=64 is walked at ef=64.
        fetch = min(self._live, math.ceil(k / max(sel, 1e-6) * 1.5) + 10)
        while True:
            self._graph.set_ef(max(HNSW_EF_SEARCH, fetch))
            labels, dists = self._graph.knn_query(vec, k=fetch, num_threads=1)
            labs = labels[0].astype(np.int64)
            scores = 1.0 - dists[0] + self._adjust(labs, q.account)
            # In adjusted-score order (the graph's order is the raw cosine's), the rows the
            # filters drop taken out as arrays; only the scope and the predicate are per row.
            order = np.argsort(-scores, kind="stable")
            order = order[self._mask(labs, q)[order]]
            hits: list[Hit] = []
            starts, rows, skeys, pred = self._starts(q.account, q.prefixes), self._rows, self._skeys, q.predicate
            for label, score in zip(labs[order].tolist(), scores[order].tolist(), strict=True):
                row = rows[label]
                if row is None or not skeys[label].startswith(starts) or (pred is not None and not pred(row)):
                    continue
                hits.append(Hit(row, score, label=label))
                if len(hits) >= k:
                    break
            if len(hits) >= k or fetch >= self._live:
                self._graph.set_ef(HNSW_EF_SEARCH)
                return hits, SearchTrace("hnsw", scope_rows, fetch)
            if fetch * 4 > self._live // 4:
                self._graph.set_ef(HNSW_EF_SEARCH)
                return self._exact(vec, q, k, scope_rows)
            fetch *= 4

    def _child_labels(self, account: str, parent_uri: str) -> np.ndarray | None:
        pkey = f"{account}\x00{parent_uri}"
        labels = self._children_arr.get(pkey)
        if labels is None:
            kids = self._children.get(pkey)
            if not kids:
                return None
            labels = np.fromiter(kids, dtype=np.int64, count=len(kids))
            self._children_arr[pkey] = labels
        return labels

    def search_children_many(self, vec: np.ndarray, account: str, parents: list[str], q: Query,
                             k: int, collect: Query | None = None) -> list[list[Hit]]:
        """`search_children` for several directories with one matrix product; with `collect`, each
        hit also says whether it passes that query's filters (scope aside), computed in the same pass."""
        with self._lock:
            groups = [self._child_labels(account, p) for p in parents]
            present = [(p, g) for p, g in zip(parents, groups, strict=True) if g is not None]
            if not present:
                return [[] for _ in parents]
            labels = np.concatenate([g for _, g in present])
            mats = []
            for p, g in present:
                pkey = f"{account}\x00{p}"
                mat = self._children_mat.get(pkey)
                if mat is None or mat.shape[0] != g.size:
                    mat = self._vecs[g]
                    self._children_mat[pkey] = mat
                mats.append(mat @ vec + self._adjust(g, account))
            scores_all = np.concatenate(mats)
            ok_all = self._mask(labels, q)
            keep_all = self._mask(labels, collect) if collect is not None else None
            out: list[list[Hit]] = []
            start = 0
            for g in groups:
                if g is None:
                    out.append([])
                    continue
                end = start + g.size
                lab, sc, ok = labels[start:end], scores_all[start:end], ok_all[start:end]
                keep = keep_all[start:end] if keep_all is not None else None
                start = end
                idx = np.flatnonzero(ok)
                if idx.size > k and q.predicate is None:
                    idx = idx[np.argpartition(-sc[idx], k - 1)[:k]]
                idx = idx[np.argsort(-sc[idx], kind="stable")]
                rows = self._rows
                labs = lab[idx].tolist()
                scs = sc[idx].tolist()
                keeps = keep[idx].tolist() if keep is not None else None
                hits: list[Hit] = []
                for j, label in enumerate(labs):
                    row = rows[label]
                    if row is None or (q.predicate is not None and not q.predicate(row)):
                        continue
                    good = True
                    if keeps is not None:
                        good = keeps[j] and (collect.predicate is None or collect.predicate(row))  # type: ignore[union-attr]
                    hits.append(Hit(row, scs[j], good))
                    if len(hits) >= k:
                        break
                out.append(hits)
            return out

    def similarity(self, vec: np.ndarray, rows: list[IndexRow]) -> list[float]:
        """Cosine of `vec` with each row's own vector (0.0 for a row no longer indexed)."""
        with self._lock:
            labels = np.array([self._labels.get(row_key(r.account, r.uri, r.level), -1) for r in rows], dtype=np.int64)
            ok = (labels >= 0) & self._alive[np.maximum(labels, 0)]
            safe = np.where(ok, labels, 0)
            scores = self._vecs[safe] @ vec
            for acct in {r.account for r in rows}:  # the hubness centre is per account
                mine = np.array([r.account == acct for r in rows]) & ok
                scores[mine] += self._adjust(safe[mine], acct)
            return [float(x) for x in np.where(ok, scores, 0.0)]

    def keyword_coverage(self, text: str, rows: list[IndexRow]) -> list[float]:
        """`KeywordIndex.coverage` of each row (0.0 for a row no longer indexed)."""
        with self._lock:
            labels = [self._labels.get(row_key(r.account, r.uri, r.level), -1) for r in rows]
        return self.keywords.coverage(text, labels)

    def keyword_coverage_labels(self, text: str, labels: list[int]) -> list[float]:
        return self.keywords.coverage(text, labels)

    def words_in(self, text: str, account: str, rows: list[tuple[str, int]]) -> list[list[str]]:
        """For each (uri, level), the words of a query its row's text holds (`KeywordIndex.words_in`)."""
        labels = [self._labels.get(row_key(account, uri, level), -1) for uri, level in rows]
        return self.keywords.words_in(text, labels)

    def absent_share(self, text: str) -> tuple[float, int]:
        """`KeywordIndex.absent_share` (how much of a query no indexed text mentions), and the size
        of the vocabulary that judgement rests on."""
        return self.keywords.absent_share(text), self.keywords.vocabulary()

    def keyword_search(self, text: str, q: Query, k: int) -> list[Hit]:
        """BM25 over the rows the query allows."""
        with self._lock:
            labels, scores = self.keyword_arrays(text, q, k)
            rows = self._rows
            return [Hit(r, s, label=lab) for lab, s in zip(labels.tolist(), scores.tolist(), strict=True)
                    if (r := rows[lab]) is not None]

    def keyword_arrays(self, text: str, q: Query, k: int) -> tuple[np.ndarray, np.ndarray]:
        """`keyword_search` as (labels, BM25 scores) arrays, best first: no hit objects for rows
        a caller only scores."""
        with self._lock:
            return self.keywords.search(text, k, lambda labels: self._allow_many(labels, q))

    def row_at(self, label: int) -> IndexRow | None:
        return self._rows[label]

    def levels_lengths(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each label's level and text length."""
        with self._lock:
            return self._level[labels], self._tlen[labels]

    def similarity_labels(self, vec: np.ndarray, labels: list[int], account: str) -> list[float]:
        """Cosine (with the hubness correction) of `vec` with these rows of one account."""
        with self._lock:
            lab = np.asarray(labels, dtype=np.int64)
            return (self._vecs[lab] @ vec + self._adjust(lab, account)).tolist()  # type: ignore[no-any-return]

    def allows(self, row: IndexRow, q: Query, scoped: bool = False) -> bool:
        """Whether one row passes every restriction of a query (for candidates found elsewhere);
        `scoped` when the caller already knows the row lies inside the query's prefixes."""
        if not scoped and not self._in_scope(row, q.account, q.prefixes):
            return False
        if q.levels is not None and row.level not in q.levels:
            return False
        if q.context_types is not None and row.context_type not in q.context_types:
            return False
        t = row.created_at if q.time_field == "created_at" else row.updated_at
        if (q.since is not None and t < q.since) or (q.until is not None and t > q.until):
            return False
        return q.predicate is None or q.predicate(row)

    def scan(self, q: Query, k: int) -> list[IndexRow]:
        """Rows the query allows, newest first, with no vector: a find that only filters."""
        with self._lock:
            labels = np.asarray(self._scope_labels(q.account, q.prefixes), dtype=np.int64)
            labels = labels[self._mask(labels, q)]
            t = (self._created if q.time_field == "created_at" else self._updated)[labels]
            out: list[IndexRow] = []
            for i in np.argsort(-t, kind="stable").tolist():
                row = self._rows[int(labels[i])]
                if row is None or (q.predicate is not None and not q.predicate(row)):
                    continue
                out.append(row)
                if len(out) >= k:
                    break
            return out

    # ----- persistence ------------------------------------------------------------

    def content_hash(self) -> str:
        """Identical for two replicas holding the same rows, whatever order they arrived in: the
        XOR of each row's digest, kept up to date by every write. (A sorted scan of every row,
        as this was, took ~0.5 s of the event loop per `system.health` at 50,000 rows.)"""
        return f"{self._chash:032x}"

    def save(self, directory: Path) -> int:
        """Write a snapshot atomically (a temp directory renamed over the old one); the sequence
        it holds. The index lock is held only to list the rows: writing them, the vectors and the
        graph takes about a second per 30,000 rows, during which searches used to wait."""
        with self._save_lock:
            return self._save(Path(directory))

    def _save(self, directory: Path) -> int:
        tmp = directory.parent / f".tmp-snap-{uuid.uuid4().hex}"
        tmp.mkdir(parents=True)
        rows, vecs, meta = self._freeze()
        try:
            np.save(tmp / "vectors.npy", vecs)
            del vecs
            (tmp / "rows.msgpack").write_bytes(msgspec.msgpack.encode(rows))
            (tmp / "foreign.msgpack").write_bytes(msgspec.msgpack.encode(meta.pop("foreign")))
            with self._graph_lock:
                self._graph.save_index(str(tmp / "graph.bin"))
        finally:
            self._thaw()
        # The files are complete: their checksums are read back without holding up searches.
        meta["crc32"] = {name: _crc32(tmp / name) for name in SNAPSHOT_FILES}
        (tmp / "meta.json").write_bytes(msgspec.json.encode(meta))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        old = directory.parent / f".tmp-old-{uuid.uuid4().hex}"
        if directory.exists():
            os.rename(directory, old)
        os.rename(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)
        return int(meta["applied_seq"])

    def _freeze(self) -> tuple[list[IndexRow | None], np.ndarray, dict[str, Any]]:
        """The rows and meta of one moment with every row in the graph, and the graph held still
        (`_saving`) until `_thaw`, so the graph written after matches them; the vectors as a view."""
        while True:
            while self.build_graph() > 0:
                pass
            with self._lock:
                if self._pending:  # rows came meanwhile: into the graph first
                    continue
                self._saving = True
                n = len(self._rows)
                meta: dict[str, Any] = {"applied_seq": self.applied_seq, "dim": self.dim, "model": self.model,
                                        "rows": n}
                meta["foreign"] = dict(self.foreign)
                # The vectors are not copied (1.5 GB at a million rows, under the lock): a slot
                # written while they are saved belongs to a row written after this moment, which
                # the snapshot's tail writes again on load; a grown array leaves this one intact.
                return self._rows[:n], self._vecs[:n], meta

    def _thaw(self) -> None:
        """The graph moves again: the deletes that waited, then the vectors that waited."""
        with self._lock:
            self._saving = False
            waited, self._unsaved_deletes = self._unsaved_deletes, []
            with self._graph_lock:
                for label, in_graph in waited:
                    if in_graph:
                        with contextlib.suppress(RuntimeError):
                            self._graph.mark_deleted(label)
            self._free.extend(label for label, _ in waited)
        while self.build_graph() > 0:
            pass

    @classmethod
    def load(cls, directory: Path, dim: int, model: str) -> VectorIndex | None:
        """The snapshot in `directory`, or None when there is none usable for this model. A
        snapshot that does not read back whole (a file truncated, bit-flipped or missing, its
        checksums off) is logged and refused: the replica then rebuilds from the index stream."""
        directory = Path(directory)
        if not (directory / "meta.json").exists():
            return None
        try:
            return cls._load(directory, dim, model)
        except Exception as e:  # noqa: BLE001 - any way a snapshot is unreadable means the same: rebuild
            log.warning("index snapshot %s is corrupt (%s: %s): rebuilding from the index stream",
                        directory, type(e).__name__, e)
            return None

    @classmethod
    def _load(cls, directory: Path, dim: int, model: str) -> VectorIndex | None:
        meta = msgspec.json.decode((directory / "meta.json").read_bytes())
        if meta.get("dim") != dim or meta.get("model") != model:
            return None
        for name, want in (meta.get("crc32") or {}).items():
            if name not in SNAPSHOT_FILES or _crc32(directory / name) != want:
                raise ValueError(f"{name} does not match its checksum")
        n = int(meta["rows"])
        idx = cls(dim, model, capacity=max(1024, n))
        rows = msgspec.msgpack.decode((directory / "rows.msgpack").read_bytes(), type=list[IndexRow | None])
        vecs = np.load(directory / "vectors.npy")
        if len(rows) != n or vecs.shape != (n, dim):
            raise ValueError(f"{len(rows)} rows and vectors {vecs.shape} for a snapshot of {n}")
        idx._graph = hnswlib.Index(space="ip", dim=dim)
        idx._graph.load_index(str(directory / "graph.bin"), max_elements=idx._vecs.shape[0])
        idx._graph.set_ef(HNSW_EF_SEARCH)
        idx._vecs[:n] = vecs
        idx._rows = rows
        for label, row in enumerate(rows):
            if row is None:
                idx._free.append(label)
                continue
            key = row_key(row.account, row.uri, row.level)
            idx._labels[key] = label
            idx._chash ^= _digest(key, row)
            idx._children.setdefault(f"{row.account}\x00{row.parent_uri}", set()).add(label)
            idx.keywords.add(label, row.text or row.abstract, row.lang or DEFAULT)
            idx._by_level.setdefault(row.level, set()).add(label)
            idx._level[label] = row.level
            idx._tlen[label] = len(row.text)
            idx._ctype[label] = CONTEXT_TYPES.index(row.context_type) if row.context_type in CONTEXT_TYPES else -1
            idx._mix[(row.level, int(idx._ctype[label]))] += 1
            idx._updated[label] = row.updated_at
            idx._created[label] = row.created_at
            idx._alive[label] = True
            idx._live += 1
        idx._skeys = [_sort_key(r.account, r.uri) if r is not None else "" for r in rows]
        pairs = sorted((idx._skeys[lab], lab) for lab, r in enumerate(rows) if r is not None)
        idx._sorted_keys = [p[0] for p in pairs]
        idx._sorted_labels = [p[1] for p in pairs]
        idx.applied_seq = int(meta.get("applied_seq", 0))
        if "foreign.msgpack" in (meta.get("crc32") or {}):  # snapshots from before it have none
            idx.foreign = msgspec.msgpack.decode((directory / "foreign.msgpack").read_bytes(), type=dict[str, str])
        return idx

    def stats(self) -> dict[str, int]:
        with self._lock:
            n = len(self._rows)
            lv = self._level[:n][self._alive[:n]]
            return {
                "rows": self._live,
                "level0": int((lv == 0).sum()),
                "level1": int((lv == 1).sum()),
                "level2": int((lv == 2).sum()),
                "applied_seq": self.applied_seq,
                "dim": self.dim,
                "graph_pending": len(self._pending),
            }
