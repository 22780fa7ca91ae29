"""The vector graph's catch-up: rows written with the graph deferred (a replica's long tail, an
8-bit graph's first rows) are moved into it by a builder thread, a batch at a time, while the index
keeps answering; an 8-bit graph (`sqgraph.py`) is also trained and, when stale, built again here."""

from __future__ import annotations

import logging

import numpy as np

from skald.store.index import sqgraph
from skald.store.index.rows import IndexRows

log = logging.getLogger("skald.store.index")


class IndexBuilding(IndexRows):
    """The graph's builder side of the index (the builder thread calls `build_graph`)."""

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
            if isinstance(self._graph, sqgraph.SqGraph):
                if self._graph.stale():
                    self._rebuild_graph()
                if not self._graph.trained_on and self._pending and self._live:
                    # The codes' ranges from a sample of every live row, not the first batch's.
                    held = np.flatnonzero(self._alive[: len(self._rows)])
                    if held.size > sqgraph.TRAIN_ROWS:
                        held = np.sort(np.random.default_rng(0).choice(held, sqgraph.TRAIN_ROWS, replace=False))
                    self._graph.train(self._qv.exact(held))
            take = list(self._pending.items())[:max_items]
            alive = [lab for lab, _ in take if self._alive[lab]]
            mat = self._qv.exact(np.asarray(alive, dtype=np.int64)) if alive else None
        if mat is not None:
            with self._graph_lock:
                self._fit_graph()
                self._graph.add_items(mat, np.asarray(alive, dtype=np.int64), num_threads=threads)
        with self._lock:
            done = [lab for lab, version in take if self._pending.get(lab) == version]
            for lab in done:
                del self._pending[lab]
            self._pending_arr = None
            self._qv.release(np.asarray(done, dtype=np.int64))  # in the graph: the float32 copy goes
            if not self._pending:
                self._previous_graph = None  # a new graph (`_rebuild_graph`) holds every row now
            return len(self._pending)

    def _rebuild_graph(self) -> None:
        """A new 8-bit graph for every live row (under the index lock): the old one's deleted
        elements dropped, its codes' ranges taken from more rows. The rows wait for it as an
        ingest's do, searched exactly until the builder has put them in."""
        with self._graph_lock:
            old = self._graph
            self._graph = self._new_graph(self._level.shape[0])
            if isinstance(old, sqgraph.SqGraph):
                self._previous_graph = old  # the waiting rows' codes until the new graph has them
        held = np.flatnonzero(self._alive[: len(self._rows)])
        log.info("vector graph built again for %d rows (%d deleted elements, codes from %d rows)",
                 held.size, getattr(old, "dead", 0), getattr(old, "trained_on", 0))
        self._pending_v += 1
        for label in held.tolist():
            self._pending.setdefault(label, self._pending_v)
        self._pending_arr = None

