"""The vector graph over 8-bit codes (`vector_graph = "sq8"`): faiss's HNSW whose elements are
each vector quantised per dimension to a byte (MIT; `IndexHNSWSQ`), about 0.55 KB a row at 384
dimensions against hnswlib's 1.8 KB of float32 and links. Its scores are approximate (a few
thousandths of a cosine), so the search asks it for more than it keeps and scores those again
exactly (`search.py`).

It answers to the calls the index makes of an hnswlib graph (`add_items`, `knn_query`,
`mark_deleted`, `set_ef`, capacity, `save_index`), with three differences the index handles:

- faiss's HNSW removes nothing: a deleted or rewritten label's element stays in the graph, left
  out of every answer by a bitmap of live elements, until the graph is built again
  (`stale`, then `IndexRows.build_graph` starts a new one and the rows wait for it, searched
  exactly meanwhile).
- The codes need a range per dimension before the first element: it is taken from the first
  rows given (widened, more so when they are few), and the graph is built again once it holds
  four times more rows than that range was taken from (up to `TRAIN_ROWS`).
- faiss's graph must not be read while it is written (hnswlib's may), so searches and inserts
  take turns. While searches come, an insert goes in pieces of `PIECE` rows on one thread (about
  a millisecond each) and, before each, stands aside while a search waits or one was answered in
  the last `GRACE_S` (a find asks the graph several times: a piece between each would make it
  wait each time). Kept aside `YIELD_MAX_S`, it takes `BURST_S` in which it stands aside only
  for a waiting search, so a steady stream of searches slows the insert but never stops it. With
  no search for `QUIET_S`, it goes in pieces sized to take about `BULK_S` on one thread (a search
  then waits that long at most: pieces of 1,024 rows took half a second at a million rows, and the
  first find after that ingest 1.28 s); with none for `QUIET_MANY_S`, `BULK_MANY_S` on every
  thread it is given: faiss's threads pay only on long pieces (at 300,000 rows, two threads took
  in 2,253 rows a second in pieces of 100, 4,552 in pieces of 2,000; one thread 2,584-2,712
  whatever the piece).
  (Pieces of 64 rows on two threads, standing aside only for a waiting search, made a find 24.6
  ms at p50 while the graph took in 105,000 rows, against 4.6 on hnswlib.)
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from skald.store.index.types import HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH, HNSW_M

KIND = "sq8"
FILE = "graph.faiss"  # faiss's own file (its codes, ranges and links)
IDS = "graph.ids.npy"  # each element's label, -1 where deleted
TRAINED = "graph.trained.npy"  # how many rows the codes' ranges were taken from, and those ranges
DEAD = "graph.dead.npy"  # the deleted elements' codes
FILES = (FILE, IDS, TRAINED, DEAD)
TRAIN_ROWS = 8_192  # rows the per-dimension ranges are taken from, at most
# Rows an insert adds at a time while searches come: about 1 ms on one thread, at the rate of 64 at once.
PIECE = 4
BULK_S = 0.02  # how long a piece takes with no search for QUIET_S
BULK_MANY_S = 0.25  # the same on several threads
MAX_PIECE = 4_096
GRACE_S = 0.003
YIELD_MAX_S = 0.02
BURST_S = 0.02
QUIET_S = 0.1
# Before pieces on several threads (a quarter of a second each): a find over a long backlog spends
# tens of milliseconds on the rows still waiting after its walk, and a stream of them found a long
# piece in the way of each (479 ms p50 during the million's catch-up).
QUIET_MANY_S = 1.0
CHUNK = 2_048  # codes converted to float32 at a time for a product (3 MB at 384 dimensions)


def _faiss() -> Any:
    """faiss, imported when an 8-bit graph is first made (a worker on hnswlib never loads it)."""
    return importlib.import_module("faiss")


def _widen(rows: int) -> float:
    """How far past the rows' own range each dimension's is taken, as a share of it: a few rows
    see a narrow range of what later rows hold (values outside it are clipped to its ends)."""
    return 0.05 if rows >= 2_048 else 0.25 if rows >= 128 else 1.0


class SqGraph:
    """An HNSW graph over 8-bit codes, keyed by the index's labels (int64)."""

    kind = KIND

    def __init__(self, dim: int, capacity: int) -> None:
        faiss = _faiss()
        self.dim = dim
        self._index = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        self._ef = HNSW_EF_SEARCH
        self.trained_on = 0  # rows the codes' ranges came from; 0: not yet
        self._ranges = np.zeros((2, dim), dtype=np.float32)  # `ranges()`, kept once trained
        self._pos = np.full(capacity, -1, dtype=np.int64)  # label -> its element, -1 for none
        self._ids = np.zeros(0, dtype=np.int64)  # element -> its label, -1 once deleted
        self._bits = np.zeros(0, dtype=np.uint8)  # live elements, a bit each (faiss's bitmap order)
        self.dead = 0
        self._turn = threading.Lock()
        self._waiting = 0
        self._searched = 0.0  # when a search last finished (time.monotonic)
        self._bulk: dict[int, int] = {}  # the next quiet piece's rows, by threads (sized on the last one's rate)

    # ----- what the index asks of a graph -------------------------------------------

    def get_max_elements(self) -> int:
        return int(self._pos.size)

    def resize_index(self, capacity: int) -> None:
        if capacity > self._pos.size:
            self._pos = np.concatenate((self._pos, np.full(capacity - self._pos.size, -1, dtype=np.int64)))

    def get_current_count(self) -> int:
        return int(self._index.ntotal)

    def set_ef(self, ef: int) -> None:
        self._ef = int(ef)

    @property
    def live(self) -> int:
        return int(self._index.ntotal) - self.dead

    def stale(self) -> bool:
        """Whether the graph is worth building again: deleted elements past a quarter of it, or
        codes whose ranges came from a small sample of what it now holds."""
        n = int(self._index.ntotal)
        few = 0 < self.trained_on < TRAIN_ROWS and self.live >= 4 * self.trained_on
        return few or self.dead > max(10_000, n // 4)

    def train(self, sample: np.ndarray) -> None:
        """Each dimension's range for the codes, from `sample` (before the first element)."""
        faiss = _faiss()
        faiss.downcast_index(self._index.storage).sq.rangestat_arg = _widen(sample.shape[0])
        self._index.train(np.ascontiguousarray(sample, dtype=np.float32))
        self.trained_on = int(sample.shape[0])
        self._ranges = self.ranges()

    def add_items(self, mat: np.ndarray, labels: np.ndarray, num_threads: int = 1) -> None:
        """Add (or replace) rows; a replaced label's old element is left out of answers from now."""
        faiss = _faiss()
        mat = np.ascontiguousarray(mat, dtype=np.float32)
        labels = np.asarray(labels, dtype=np.int64)
        if labels.size == 0:
            return
        if self.trained_on == 0:
            self.train(mat[:TRAIN_ROWS])
        i, burst = 0, 0.0
        while i < labels.size:
            since_search = time.monotonic() - self._searched
            quiet = since_search > QUIET_S
            if not quiet:
                since = time.monotonic()
                while self._waiting or (since >= burst and time.monotonic() - self._searched < GRACE_S):
                    if not self._waiting and time.monotonic() - since >= YIELD_MAX_S:
                        burst = time.monotonic() + BURST_S  # kept aside long enough: its turn
                        break
                    time.sleep(0.0005)
            threads = max(1, num_threads) if since_search > QUIET_MANY_S else 1
            planned = self._bulk.get(threads, PIECE) if quiet else PIECE
            size = min(planned, labels.size - i)
            started = time.monotonic()
            with self._turn:
                faiss.omp_set_num_threads(threads)
                self._add(mat[i : i + size], labels[i : i + size])
            if quiet:  # the next piece sized on this one's rate
                took = max(time.monotonic() - started, 1e-4)
                target = BULK_S if threads == 1 else BULK_MANY_S
                self._bulk[threads] = int(min(max(size * target / took, PIECE), 4 * planned, MAX_PIECE))
            i += size

    def _add(self, mat: np.ndarray, labels: np.ndarray) -> None:
        # The last of a label repeated in the batch wins; the others are added dead.
        first = self._index.ntotal
        n = labels.size
        self.resize_index(int(labels.max()) + 1)
        need = first + n
        if self._ids.size < need:
            grown = max(need, 2 * self._ids.size, 1024)
            self._ids = np.concatenate((self._ids, np.full(grown - self._ids.size, -1, dtype=np.int64)))
            self._bits = np.concatenate((self._bits, np.zeros((grown + 7) // 8 - self._bits.size, dtype=np.uint8)))
        for label in labels.tolist():
            self._drop(label)
        self._index.add(mat)
        elements = np.arange(first, need, dtype=np.int64)
        self._pos[labels] = elements  # in order: a repeated label keeps its last element
        self._ids[first:need] = labels
        kept = self._pos[labels] == elements
        self._set_bits(elements[kept], True)
        self._ids[elements[~kept]] = -1
        self.dead += int((~kept).sum())

    def _set_bits(self, elements: np.ndarray, on: bool) -> None:
        byte, bit = elements >> 3, (np.uint8(1) << (elements & 7).astype(np.uint8))
        if on:
            np.bitwise_or.at(self._bits, byte, bit)
        else:
            np.bitwise_and.at(self._bits, byte, ~bit)

    def _drop(self, label: int) -> bool:
        at = int(self._pos[label]) if label < self._pos.size else -1
        if at < 0:
            return False
        self._pos[label] = -1
        self._ids[at] = -1
        self._set_bits(np.asarray([at], dtype=np.int64), False)
        self.dead += 1
        return True

    def mark_deleted(self, label: int) -> None:
        """Leave a label out of answers (RuntimeError when the graph does not hold it, as hnswlib)."""
        with self._turn:
            if not self._drop(int(label)):
                raise RuntimeError(f"label {label} is not in the graph")

    def knn_query(self, vec: np.ndarray, k: int = 1, num_threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(labels, 1 - approximate cosine) of the k nearest live rows, each as one row of a 2-D
        array as hnswlib returns them (fewer than k when the graph holds fewer)."""
        faiss = _faiss()
        q = np.ascontiguousarray(np.asarray(vec, dtype=np.float32).reshape(1, self.dim))
        self._waiting += 1
        with self._turn:
            self._waiting -= 1
            n = int(self._index.ntotal)
            if n == 0:
                return np.zeros((1, 0), dtype=np.uint64), np.zeros((1, 0), dtype=np.float32)
            params = faiss.SearchParametersHNSW(efSearch=max(self._ef, k))
            if self.dead:
                params.sel = faiss.IDSelectorBitmap(n, faiss.swig_ptr(self._bits))
            sims, found = self._index.search(q, min(k, n), params=params)
            labels = self._ids[found[0][found[0] >= 0]]
            sims = sims[0][found[0] >= 0]
            self._searched = time.monotonic()
        ok = labels >= 0
        return labels[ok].reshape(1, -1).astype(np.uint64), (1.0 - sims[ok]).reshape(1, -1)

    # ----- on disk -------------------------------------------------------------------

    def _gather(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which labels the graph holds, their codes), copied out under the turn."""
        self._waiting += 1
        with self._turn:
            self._waiting -= 1
            inside = labels < self._pos.size
            pos = np.full(labels.size, -1, dtype=np.int64)
            pos[inside] = self._pos[labels[inside]]
            found = pos >= 0
            codes = self.codes()[pos[found]] if found.any() else np.zeros((0, self.dim), dtype=np.uint8)
        return found, codes

    def dot(self, labels: np.ndarray, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which labels the graph holds, each one's product with `vec` from its codes)."""
        found, codes = self._gather(labels)
        out = np.zeros(labels.size, dtype=np.float32)
        if codes.shape[0]:
            lowest, width = self._ranges
            w = (vec * width / 255.0).astype(np.float32)
            dots = np.empty(codes.shape[0], dtype=np.float32)
            buf = np.empty((min(codes.shape[0], CHUNK), self.dim), dtype=np.float32)
            for i in range(0, codes.shape[0], CHUNK):  # converted a chunk at a time, as qvectors' int8
                part = codes[i : i + CHUNK]
                np.copyto(buf[: part.shape[0]], part, casting="unsafe")
                np.matmul(buf[: part.shape[0]], w, out=dots[i : i + part.shape[0]])
            out[found] = dots + np.float32((lowest + 0.5 * width / 255.0) @ vec)
        return found, out

    def decode(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which labels the graph holds, their vectors as the codes give them)."""
        found, codes = self._gather(labels)
        out = np.zeros((labels.size, self.dim), dtype=np.float32)
        if codes.shape[0]:
            lowest, width = self._ranges
            out[found] = lowest + (codes.astype(np.float32) + 0.5) * (width / 255.0)
        return found, out

    def codes(self) -> np.ndarray:
        """The elements' codes, (elements, dim) uint8, a view into faiss's storage: valid until
        the next insert (read it under the turn, or while nothing inserts)."""
        faiss = _faiss()
        n = int(self._index.ntotal)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.uint8)
        store = faiss.downcast_index(self._index.storage)
        return faiss.rev_swig_ptr(store.codes.data(), n * self.dim).reshape(n, self.dim)

    def ranges(self) -> np.ndarray:
        """Each dimension's lowest value and its range's width, (2, dim) float32: a code c stands
        for lowest + (c + 0.5) / 255 * width."""
        faiss = _faiss()
        trained = faiss.vector_to_array(faiss.downcast_index(self._index.storage).sq.trained)
        return trained.reshape(2, self.dim).astype(np.float32)

    def save_index(self, path: str) -> None:
        """The graph into the directory of `path` (where hnswlib's file would go): its links
        (FILE, without the codes: they are made again from the snapshot's vectors on load, 0.4
        GB less on disk at a million rows), each element's label (IDS), the codes' ranges
        (TRAINED) and the codes of deleted elements (DEAD: their vectors are nowhere else, and
        the graph's walks still pass through them). Nothing may write it meanwhile."""
        faiss = _faiss()
        directory = Path(path).parent
        n = int(self._index.ntotal)
        faiss.write_index(self._index, str(directory / FILE), faiss.IO_FLAG_SKIP_STORAGE)
        ids = self._ids[:n]
        np.save(directory / IDS, ids)
        head = np.full(self.dim, float(self.trained_on), dtype=np.float32)
        np.save(directory / TRAINED, np.vstack([head, self.ranges()]) if self.trained_on else head[None, :])
        np.save(directory / DEAD, np.ascontiguousarray(self.codes()[ids < 0]))

    @classmethod
    def load(cls, directory: Path, dim: int, capacity: int, vectors: Path, chunk: int = 65_536) -> SqGraph:
        """What `save_index` wrote, the live elements' codes made again from `vectors` (float16,
        in label order: the snapshot's vectors file)."""
        faiss = _faiss()
        graph = cls(dim, capacity)
        index = faiss.read_index(str(directory / FILE))
        if not isinstance(index, faiss.IndexHNSWSQ) or index.d != dim:
            raise ValueError(f"{FILE}: not an 8-bit HNSW graph of dimension {dim}")
        n = int(index.ntotal)
        ids = np.load(directory / IDS).astype(np.int64)
        trained = np.load(directory / TRAINED)
        dead = np.load(directory / DEAD)
        if ids.shape != (n,) or trained.shape[1:] != (dim,) or dead.shape != (int((ids < 0).sum()), dim):
            raise ValueError(f"{IDS} {ids.shape}, {TRAINED} {trained.shape}, {DEAD} {dead.shape} for a graph "
                             f"of {n} elements of dimension {dim}")
        store = graph._index.storage  # a new graph's storage, given the saved ranges and codes
        graph.trained_on = int(trained[0, 0])
        if graph.trained_on:
            faiss.copy_array_to_vector(np.ascontiguousarray(trained[1:].ravel()),
                                       faiss.downcast_index(store).sq.trained)
            store.is_trained = True
            graph._ranges = trained[1:].astype(np.float32)
        vmap = np.memmap(vectors, dtype="<f2", mode="r").reshape(-1, dim) if n else np.zeros((0, dim), "<f2")
        taken = 0
        for i in range(0, n, chunk):
            labels = ids[i : i + chunk]
            live = labels >= 0
            part = np.empty((labels.size, dim), dtype=np.uint8)
            if live.any():
                if int(labels.max()) >= vmap.shape[0]:
                    raise ValueError(f"{vectors} holds {vmap.shape[0]} vectors, the graph a label {labels.max()}")
                part[live] = store.sa_encode(np.asarray(vmap[labels[live]], dtype=np.float32))
            gone = int((~live).sum())
            part[~live] = dead[taken : taken + gone]
            taken += gone
            store.add_sa_codes(part)
        del vmap
        index.storage = store
        index.own_fields = True
        graph._index.own_fields = False  # the storage is the loaded graph's now
        graph._index = index
        graph._ids = ids
        graph._bits = np.zeros((ids.size + 7) // 8, dtype=np.uint8)
        alive = np.flatnonzero(ids >= 0)
        graph.resize_index(int(ids.max()) + 1 if ids.size else 0)
        graph._pos[ids[alive]] = alive
        graph._set_bits(alive, True)
        graph.dead = int(ids.size - alive.size)
        return graph


class GraphCodes:
    """The rows' approximate vectors out of the 8-bit graphs holding them (`qvectors.Coded`): the
    index's graph, then the one it replaces while a new one is built (`graphs` gives both)."""

    def __init__(self, dim: int, graphs: Callable[[], tuple[Any, SqGraph | None]]) -> None:
        self.dim = dim
        self._graphs = graphs

    def _each(self, labels: np.ndarray, ask: Callable[[SqGraph, np.ndarray], tuple[np.ndarray, np.ndarray]],
              out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.zeros(labels.size, dtype=bool)
        for graph in self._graphs():
            if not isinstance(graph, SqGraph) or found.all():
                continue
            rest = np.flatnonzero(~found)
            got, vals = ask(graph, labels[rest])
            out[rest[got]] = vals[got]
            found[rest[got]] = True
        return found, out

    def dot(self, labels: np.ndarray, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._each(labels, lambda g, lab: g.dot(lab, vec), np.zeros(labels.size, dtype=np.float32))

    def decode(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._each(labels, SqGraph.decode, np.zeros((labels.size, self.dim), dtype=np.float32))
