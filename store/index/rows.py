"""The index's rows: the arrays and maps every part of the index reads (vectors, levels, times,
the sorted scope keys, the vector graph and its pending labels), and the writes that keep them in
step (upsert, delete, the hubness correction); the graph's catch-up is `building.py`'s."""

from __future__ import annotations

import bisect
import contextlib
import logging
import sys
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import hnswlib
import msgspec
import numpy as np

from skald.messages.index import IndexRow
from skald.store.bm25 import KeywordIndex
from skald.store.index import sqgraph
from skald.store.index.qvectors import QuantisedVectors
from skald.store.index.texts import TextHeap
from skald.store.index.types import (
    CONTEXT_TYPES,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
    row_digest,
    row_key,
    row_name,
    text_held,
)
from skald.store.language import DEFAULT

log = logging.getLogger("skald.store.index")
# Float32 vectors of directories' children kept for the descent (48 MB at 384-d); the int8 copy
# is the one every row has, this only spares a hot directory its gather.
CHILD_VECTORS_CACHED = 32_768
GRAPH_KINDS = ("hnsw", sqgraph.KIND)  # hnswlib's float32 graph (the default), faiss's over 8-bit codes
# Row fields whose values repeat across rows, kept as one interned string each.
SHARED_FIELDS = ("account", "parent_uri", "context_type", "category", "owner", "model", "kind", "lang")


class IndexRows:
    """Thread-safe for one writer and many readers through a single lock (writes are short)."""

    def __init__(self, dim: int, model: str = "", capacity: int = 1024, text_dir: Path | None = None,
                 graph: str = "hnsw") -> None:
        """`text_dir`: where the files of leaf texts and float32 vectors go (unlinked temporary
        files; the system's temporary directory when None); `graph`: one of `GRAPH_KINDS`."""
        if graph not in GRAPH_KINDS:
            raise ValueError(f"vector graph {graph!r}: must be one of {', '.join(GRAPH_KINDS)}")
        self.dim = dim
        self.graph_kind = graph
        self.model = model
        self._lock = threading.RLock()
        self._labels: dict[str, int] = {}
        self._rows: list[IndexRow | None] = []
        self._skeys: list[str] = []  # each row's `row_key` (its scope key and level), "" for a free slot
        # int8 per row (an 8-bit graph's codes serve instead); float32 while a row waits for the graph.
        coded = sqgraph.GraphCodes(dim, lambda: (self._graph, self._previous_graph)) if graph == sqgraph.KIND else None
        self._qv = QuantisedVectors(dim, capacity, text_dir, coded)
        self._texts = TextHeap(text_dir, capacity)  # leaf rows' text, in a file (`texts.py`)
        # Leaf rows' abstracts likewise (about 0.5 KB a row as strings): read for the hits a reply serves.
        self._abstracts = TextHeap(text_dir, capacity)
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
        self._pending_arr: np.ndarray | None = None  # its labels sorted, made when a search needs them
        self._pending_v = 0
        self._graph_lock = threading.Lock()
        # While a snapshot writes the graph (`save`), nothing changes it: new vectors wait in
        # `_pending` (scored exactly), deletes wait here, and searches go on.
        self._saving = False
        self._saved_writes = 0  # the vectors' write count when a snapshot's rows were taken (`qvectors.rebase`)
        self._save_lock = threading.Lock()  # one snapshot at a time (a stopping replica saves too)
        self._unsaved_deletes: list[tuple[int, bool]] = []  # (label, whether the graph holds it)
        self._children: dict[str, set[int]] = {}  # `account NUL parent_uri` -> labels of its children
        self._children_arr: dict[str, np.ndarray] = {}  # the same as arrays, built on first use
        # Their vectors, gathered once per change, least recently used first: CHILD_VECTORS_CACHED rows at most.
        self._children_mat: dict[str, np.ndarray] = {}
        self._children_mat_rows = 0
        self._by_level: dict[int, set[int]] = {0: set(), 1: set(), 2: set()}
        self._level_arr: dict[frozenset[int], np.ndarray] = {}
        self._level_mat: dict[frozenset[int], np.ndarray] = {}  # vectors of those rows, gathered once
        self._live = 0
        self._chash = 0  # XOR of every live row's digest (`row_digest`): `content_hash` without a scan
        # Rows whose latest write came from another embedder (key -> its name): not searchable
        # here, counted until this embedder writes or deletes them (`content.reindex`).
        self.foreign: dict[str, str] = {}
        self.keywords = KeywordIndex()
        # The labels keyword-written since a snapshot's rows were taken, while that snapshot's
        # keyword index is to replace this one (`adopt.py`); None otherwise.
        self._kw_log: list[int] | None = None
        self._graph = self._new_graph(capacity)
        # The 8-bit graph a new one replaces, while the rows wait for the new one: their codes.
        self._previous_graph: sqgraph.SqGraph | None = None
        self.applied_seq = 0

    def _new_graph(self, capacity: int) -> hnswlib.Index | sqgraph.SqGraph:
        if self.graph_kind == sqgraph.KIND:
            return sqgraph.SqGraph(self.dim, capacity)
        graph = hnswlib.Index(space="ip", dim=self.dim)
        graph.init_index(max_elements=capacity, ef_construction=HNSW_EF_CONSTRUCTION, M=HNSW_M)
        graph.set_ef(HNSW_EF_SEARCH)
        return graph

    # ----- writes -----------------------------------------------------------------

    def __len__(self) -> int:
        return self._live

    def _grow(self, need: int) -> None:
        cap = self._level.shape[0]
        if need <= cap:
            return
        new = max(need, cap * 2)
        self._qv.grow(new)
        self._texts.grow(new)
        self._abstracts.grow(new)
        for name in ("_level", "_ctype", "_updated", "_created", "_alive", "_adj", "_tlen"):
            old = getattr(self, name)
            arr = np.zeros((new, *old.shape[1:]), dtype=old.dtype)
            arr[: old.shape[0]] = old
            setattr(self, name, arr)

    def _drop_children_mat(self, pkey: str) -> None:
        if (gone := self._children_mat.pop(pkey, None)) is not None:
            self._children_mat_rows -= gone.shape[0]

    def _keep_children_mat(self, pkey: str, mat: np.ndarray) -> None:
        """Cache a directory's children's vectors, the least recently used going first past the bound."""
        self._drop_children_mat(pkey)
        while self._children_mat and self._children_mat_rows + mat.shape[0] > CHILD_VECTORS_CACHED:
            self._drop_children_mat(next(iter(self._children_mat)))
        self._children_mat[pkey] = mat
        self._children_mat_rows += mat.shape[0]

    def _fit_graph(self) -> None:
        """The graph's capacity brought up to the arrays' (under the graph lock, before an add):
        growing it in `_grow` would wait, holding the index lock, for a snapshot writing the graph."""
        if self._graph.get_max_elements() < self._level.shape[0]:
            self._graph.resize_index(self._level.shape[0])

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
            texts: list[tuple[int, str, str]] = []  # keyword-indexed after the loop, as one batch
            for row, vec in items:
                if vec.shape != (self.dim,):
                    raise ValueError(f"vector of dim {vec.shape} for an index of dim {self.dim}")
                key = row_key(row.account, row.uri, row.level)
                if self.foreign:
                    self.foreign.pop(row_name(row.account, row.uri, row.level), None)
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
                    self._skeys[label] = key  # one string: the label's key, and its place in scope order
                    pos = bisect.bisect_right(self._sorted_keys, key)
                    self._sorted_keys.insert(pos, key)
                    self._sorted_labels.insert(pos, label)
                    self._live += 1
                old = self._rows[label]
                if old is not None and old.parent_uri != row.parent_uri:
                    self._children.get(f"{old.account}\x00{old.parent_uri}", set()).discard(label)
                    self._children_arr.pop(f"{old.account}\x00{old.parent_uri}", None)
                    self._drop_children_mat(f"{old.account}\x00{old.parent_uri}")
                pkey = f"{row.account}\x00{row.parent_uri}"
                self._drop_children_mat(pkey)
                kids = self._children.setdefault(pkey, set())
                if label not in kids:
                    kids.add(label)
                    self._children_arr.pop(pkey, None)
                text, abstract, leaf = row.text, row.abstract, row.level == 2
                held = text_held(row.level, row.kind)
                # The vector lives in `_qv`, a leaf's text and abstract in `_texts` and `_abstracts`
                # (so does a document's table of contents): held once each. The fields many rows
                # repeat (a document's sections share their parent) are one string each. A
                # section's title (its heading path, about 130 bytes) is not kept: nothing the
                # index serves reads it (its text starts with it).
                row = msgspec.structs.replace(row, vector=b"", text="" if held else text, title="",
                                              abstract="" if leaf else abstract,
                                              **{f: sys.intern(getattr(row, f)) for f in SHARED_FIELDS})
                if old is not None:
                    self._chash ^= row_digest(old)
                self._chash ^= row_digest(row)
                self._rows[label] = row
                if row.level != 2 or (old is not None and old.level != 2):
                    self._level_mat.clear()
                if old is not None and old.level != row.level:
                    self._by_level.get(old.level, set()).discard(label)
                if label not in self._by_level.setdefault(row.level, set()):
                    self._by_level[row.level].add(label)
                    self._level_arr.clear()
                    self._level_mat.clear()
                texts.append((label, text or abstract, row.lang or DEFAULT))
                if held:
                    self._texts.put(label, text)
                elif old is not None and text_held(old.level, old.kind):
                    self._texts.drop(label)  # a long document's key now a directory's, say
                if leaf:  # a label's level is its key's: a summary row never held an abstract here
                    self._abstracts.put(label, abstract)
                self._tlen[label] = len(text)
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
            self.keywords.add_many(texts)
            if self._kw_log is not None:
                self._kw_log.extend(label for label, _, _ in texts)
            # Dedup within the batch: the last vector for a label wins.
            last: dict[int, np.ndarray] = dict(zip(labels, vecs, strict=True))
            lab = np.fromiter(last.keys(), dtype=np.int64, count=len(last))
            mat = np.stack(list(last.values())).astype(np.float32, copy=False)
            # An 8-bit graph takes its codes' ranges from its first rows: a few written one by one
            # wait for the builder's batch rather than set them.
            untrained = isinstance(self._graph, sqgraph.SqGraph) and not self._graph.trained_on
            waits = bool(defer_graph or self._pending or self._saving or untrained)
            self._qv.put(lab, mat, fresh=waits)
            self._adj[lab] = self._hub_adjust(mat, self._level[lab])
            for label in lab.tolist():
                self._count_adj(label)
            if waits:
                self._pending_v += 1
                self._pending.update(dict.fromkeys(lab.tolist(), self._pending_v))
                self._pending_arr = None
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
                self._adj[part] = self._hub_adjust(self._qv.exact(part), self._level[part])
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

    def note_foreign(self, account: str, uri: str, level: int, model: str) -> None:
        """A row another embedder wrote: counted (`foreign`), never searched."""
        with self._lock:
            self.foreign[row_name(account, uri, level)] = model

    def delete(self, account: str, uri: str, level: int) -> bool:
        with self._lock:
            key = row_key(account, uri, level)
            if self.foreign:
                self.foreign.pop(row_name(account, uri, level), None)
            label = self._labels.pop(key, None)
            if label is None:
                return False
            i = bisect.bisect_left(self._sorted_keys, key)  # a key is one row's
            if i < len(self._sorted_keys) and self._sorted_labels[i] == label:
                del self._sorted_keys[i]
                del self._sorted_labels[i]
            old = self._rows[label]
            if old is not None:
                kids = self._children.get(f"{old.account}\x00{old.parent_uri}")
                self._children_arr.pop(f"{old.account}\x00{old.parent_uri}", None)
                self._drop_children_mat(f"{old.account}\x00{old.parent_uri}")
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
                self._chash ^= row_digest(old)
            self._rows[label] = None
            self._skeys[label] = ""
            self.keywords.remove(label)
            if self._kw_log is not None:
                self._kw_log.append(label)
            self._texts.drop(label)
            self._abstracts.drop(label)
            self._qv.release(np.asarray([label], dtype=np.int64))
            if self._alive[label]:
                self._mix[(int(self._level[label]), int(self._ctype[label]))] -= 1
            self._alive[label] = False
            in_graph = self._pending.pop(label, None) is None
            self._pending_arr = None
            if self._saving:  # the graph is being written: marked, and the label freed, after it
                self._unsaved_deletes.append((label, in_graph))
            else:
                if in_graph:
                    with self._graph_lock, contextlib.suppress(RuntimeError):
                        self._graph.mark_deleted(label)
                self._free.append(label)
            self._live -= 1
            return True
