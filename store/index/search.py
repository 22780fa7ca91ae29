"""Vector search over the rows a query allows.

Which engine answers depends on how many rows a query may touch: a selective scope (a subtree, a
level, a context type) is scored exactly with one matrix product over just those rows, while a
broad scope asks hnswlib and post-filters, over-fetching by the scope's selectivity. A filtered
hnswlib walk was measured 8-45x slower than brute force over the allowed rows
(docs/design/vectors.md), so it is never used."""

from __future__ import annotations

import math

import numpy as np

from skald.messages.index import IndexRow
from skald.store.index.scopes import IndexScopes
from skald.store.index.types import BRUTE_FORCE_MAX, HNSW_EF_SEARCH, SMALL_INDEX, Hit, Query, SearchTrace, row_key

# Rows past k an 8-bit graph is asked for, at least, all scored again exactly: recall@10 against
# brute force at 145,000 clustered rows 0.974 / 0.978 / 0.978 / 0.978 / 0.980 with 5 / 10 / 15 /
# 20 / 30 (hnswlib 0.980), a search 0.39 / 0.39 / 0.39 / 0.42 / 0.44 ms.
CODED_EXTRA = 15


def _margin(k: int) -> int:
    """Candidates taken past k by the int8 scores, so the exact ones decide the order at the cut
    (int8 moves a cosine by at most about 0.002)."""
    return 4 + k // 8


class IndexSearch(IndexScopes):
    """Vector search over the rows a query allows: exact over a selective scope, the graph over a broad one."""

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
            if sel * self._live <= BRUTE_FORCE_MAX or self._live - len(self._pending) <= BRUTE_FORCE_MAX:
                # Selective, or the graph holds few rows yet (an ingest into an empty index): the
                # rows it holds cost little to score exactly beside the waiting ones. Once it
                # holds more, it answers for them: scoring them from int8 cost 7-12 ms a 100k
                # rows, the graph's walk under a millisecond.
                return self._exact(vec, q, k, scope_rows)
            hits, trace = self._graph_search(vec, q, k, sel, scope_rows)
            if self._pending and trace.engine in ("hnsw", "sq8"):
                # Rows written since the graph was last built (a large ingest the graph is still
                # taking in): the graph answers for the rows it holds and only the waiting ones are
                # scored exactly. A waiting row the graph also returned was re-written: the graph's
                # score is its old vector's, so the exact one replaces it.
                more, examined = self._pending_search(vec, q, k)
                hits = sorted([*(h for h in hits if h.label not in self._pending), *more],
                              key=lambda h: -h.score)[:k]
                trace = SearchTrace(f"{trace.engine}+pending", scope_rows, trace.examined + examined)
            return hits, trace

    def _pending_search(self, vec: np.ndarray, q: Query, k: int) -> tuple[list[Hit], int]:
        """The k best rows among those waiting for the graph that pass the query's filters, scored
        with one product (`QuantisedVectors.dot`: a sign-code shortlist first when they are many),
        the scope and predicate checked per candidate in score order; and how many were scored."""
        if self._pending_arr is None:
            self._pending_arr = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
            self._pending_arr.sort()
        labels = self._pending_arr[self._mask(self._pending_arr, q)]
        if not labels.size:
            return [], 0
        scores = self._qv.dot(labels, vec) + self._adjust(labels, q.account)
        return self._best_in_scope(labels, scores, vec, q, k), int(labels.size)

    def _exact(self, vec: np.ndarray, q: Query, k: int, scope_rows: int,
               labels: np.ndarray | None = None) -> tuple[list[Hit], SearchTrace]:
        """The k best of the scope's rows (or of `labels`, already in scope), scored exactly."""
        if labels is None:
            labels = self._scope_array(q.account, q.prefixes)
        labels = labels[self._mask(labels, q)]
        if labels.size == 0:
            return [], SearchTrace("exact", scope_rows, 0)
        n = len(self._rows)
        if labels.size * 3 > n:  # most of the index: products over the contiguous matrix beat gathering rows
            sims = self._qv.dot_all(n, vec)[labels]
        else:
            sims = self._qv.dot(labels, vec)
        scores = sims + self._adjust(labels, q.account)
        hits: list[Hit] = []
        # Take candidates in score order; the predicate (tags, metadata) may reject some. A few
        # more than k: the int8 scores choose, the exact ones order (`_rescored`).
        k, asked = k + _margin(k), k
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
                return self._rescored(hits, vec, q.account, asked), SearchTrace("exact", scope_rows, int(labels.size))
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
            mat = self._qv.approx(labels)  # float32: few rows (BRUTE_FORCE_MAX at most), scored often
            self._level_mat[key] = mat
        if labels.size == 0:
            return [], SearchTrace("exact-levels", scope_rows, 0)
        scores = mat @ vec + self._adjust(labels, q.account)
        hits = self._best_in_scope(labels, np.where(self._mask(labels, q), scores, -np.inf), vec, q, k)
        return hits, SearchTrace("exact-levels", scope_rows, int(labels.size))

    def _best_in_scope(self, labels: np.ndarray, scores: np.ndarray, vec: np.ndarray, q: Query, k: int) -> list[Hit]:
        """The k best of `labels` by `scores` (-inf: filtered out) whose rows lie in the query's
        scope and pass its predicate, checked per candidate in score order: for label sets the
        scope does not select (a level's rows, the rows waiting for the graph)."""
        hits = self._first_in_scope(labels, scores, q, k + _margin(k))
        return self._rescored(hits, vec, q.account, k)

    def _first_in_scope(self, labels: np.ndarray, scores: np.ndarray, q: Query, k: int) -> list[Hit]:
        starts, rows, skeys, pred = self._starts(q.account, q.prefixes), self._rows, self._skeys, q.predicate
        want = min(labels.size, max(k * 8, 64))
        while True:
            top = np.argpartition(-scores, want - 1)[:want] if want < labels.size else np.arange(labels.size)
            top = top[np.argsort(-scores[top], kind="stable")]
            hits: list[Hit] = []
            for i in top.tolist():
                sc = float(scores[i])
                if sc == -np.inf:
                    return hits
                label = int(labels[i])
                row = rows[label]
                if row is None or not skeys[label].startswith(starts) or (pred is not None and not pred(row)):
                    continue
                hits.append(Hit(row, sc, label=label))
                if len(hits) >= k:
                    return hits
            if want >= labels.size:
                return hits
            want = min(labels.size, want * 8)

    def _rescored(self, hits: list[Hit], vec: np.ndarray, account: str, k: int) -> list[Hit]:
        """Hits chosen by the int8 copy's scores, scored again exactly (the float32 copy), best
        first, the k best kept: what a caller sees is the cosine itself."""
        return self._rescored_groups([hits], vec, account, k)[0]

    def _rescored_groups(self, groups: list[list[Hit]], vec: np.ndarray, account: str, k: int) -> list[list[Hit]]:
        """`_rescored` of several lists with one read of their float32 rows."""
        every = [h for hits in groups for h in hits]
        if every:
            labels = np.fromiter((h.label for h in every), dtype=np.int64, count=len(every))
            exact = (self._qv.exact_dot(labels, vec) + self._adjust(labels, account)).tolist()
            for h, sc in zip(every, exact, strict=True):
                h.score = sc
        for hits in groups:
            hits.sort(key=lambda h: -h.score)
        return [hits[:k] for hits in groups]

    def _graph_search(
        self, vec: np.ndarray, q: Query, k: int, sel: float, scope_rows: int
    ) -> tuple[list[Hit], SearchTrace]:
        # Half again what the filters are expected to leave: at 100k rows a page of 1.5k (not
        # 2k) costs 0.92 against 1.33 ms for k=150 and gives up 0.001 of the top 100's mean
        # cosine (the top 100 span 0.10); a page below ef=64 is walked at ef=64.
        held = self._live - len(self._pending)  # rows the graph answers for (never asked past them)
        # An 8-bit graph's scores are a few thousandths off: more are taken, then scored exactly
        # (CODED_EXTRA past ten; a quarter more past a long page, whose cut matters less).
        coded = self.graph_kind != "hnsw"
        keep, k = k, k + max(k // 4, CODED_EXTRA) if coded else k
        fetch = min(held, math.ceil(k / max(sel, 1e-6) * 1.5) + 10)
        while True:
            self._graph.set_ef(max(HNSW_EF_SEARCH, fetch))
            try:
                labels, dists = self._graph.knn_query(vec, k=fetch, num_threads=1)
            except RuntimeError:
                # hnswlib walked fewer than `fetch` rows: it can while the builder inserts beside
                # the walk (seen once in a few hundred searches during a catch-up). Exactly, then.
                self._graph.set_ef(HNSW_EF_SEARCH)
                return self._exact(vec, q, keep, scope_rows)
            labs = labels[0].astype(np.int64)
            scores = 1.0 - dists[0] + self._adjust(labs, q.account)
            # In adjusted-score order (the graph's order is the raw cosine's), the rows the
            # filters drop taken out as arrays; only the scope and the predicate are per row.
            order = np.argsort(-scores, kind="stable")
            order = order[self._mask(labs, q)[order]]
            hits: list[Hit] = []
            passed: list[int] = []  # an 8-bit graph's: the rows passing, scored exactly before any Hit is made
            starts, rows, skeys, pred = self._starts(q.account, q.prefixes), self._rows, self._skeys, q.predicate
            for label, score in zip(labs[order].tolist(), scores[order].tolist(), strict=True):
                row = rows[label]
                if row is None or not skeys[label].startswith(starts) or (pred is not None and not pred(row)):
                    continue
                if coded:
                    passed.append(label)
                    if len(passed) >= k:
                        break
                    continue
                hits.append(Hit(row, score, label=label))
                if len(hits) >= k:
                    break
            if max(len(hits), len(passed)) >= k or fetch >= held:
                self._graph.set_ef(HNSW_EF_SEARCH)
                if coded:
                    trace = SearchTrace(self.graph_kind, scope_rows, fetch)
                    return self._best_exact(passed, vec, q.account, keep), trace
                return hits, SearchTrace("hnsw", scope_rows, fetch)
            if fetch * 4 > held // 4:
                self._graph.set_ef(HNSW_EF_SEARCH)
                return self._exact(vec, q, keep, scope_rows)
            fetch *= 4

    def _best_exact(self, labels: list[int], vec: np.ndarray, account: str, k: int) -> list[Hit]:
        """The k best of `labels` (rows already checked against a query) by their exact scores."""
        if not labels:
            return []
        lab = np.asarray(labels, dtype=np.int64)
        exact = self._qv.exact_dot(lab, vec) + self._adjust(lab, account)
        top = np.argsort(-exact, kind="stable")[:k]
        rows = self._rows
        return [Hit(rows[label], score, label=label)
                for label, score in zip(lab[top].tolist(), exact[top].tolist(), strict=True)]

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
                    mat = self._qv.approx(g)
                self._keep_children_mat(pkey, mat)  # most recently used
                mats.append(mat @ vec + self._adjust(g, account))
            scores_all = np.concatenate(mats)
            ok_all = self._mask(labels, q)
            keep_all = self._mask(labels, collect) if collect is not None else None
            out: list[list[Hit]] = []
            start = 0
            for grp in groups:
                if grp is None:
                    out.append([])
                    continue
                end = start + grp.size
                lab, sc, ok = labels[start:end], scores_all[start:end], ok_all[start:end]
                keep = keep_all[start:end] if keep_all is not None else None
                start = end
                idx = np.flatnonzero(ok)
                kk = k + _margin(k)
                if idx.size > kk and q.predicate is None:
                    idx = idx[np.argpartition(-sc[idx], kk - 1)[:kk]]
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
                    hits.append(Hit(row, scs[j], good, label=label))
                    if len(hits) >= kk:
                        break
                out.append(hits)
            return self._rescored_groups(out, vec, account, k)

    def similarity(self, vec: np.ndarray, rows: list[IndexRow]) -> list[float]:
        """Cosine of `vec` with each row's own vector (0.0 for a row no longer indexed)."""
        with self._lock:
            labels = np.array([self._labels.get(row_key(r.account, r.uri, r.level), -1) for r in rows], dtype=np.int64)
            ok = (labels >= 0) & self._alive[np.maximum(labels, 0)]
            safe = np.where(ok, labels, 0)
            scores = self._qv.exact_dot(safe, vec)
            for acct in {r.account for r in rows}:  # the hubness centre is per account
                mine = np.array([r.account == acct for r in rows]) & ok
                scores[mine] += self._adjust(safe[mine], acct)
            return [float(x) for x in np.where(ok, scores, 0.0)]

    def row_at(self, label: int) -> IndexRow | None:
        return self._rows[label]

    def levels_lengths(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each label's level and text length."""
        with self._lock:
            return self._level[labels], self._tlen[labels]

    def similarity_labels(self, vec: np.ndarray, labels: list[int], account: str,
                          exact: bool = True) -> np.ndarray:
        """Cosine (with the hubness correction) of `vec` with these rows of one account; with
        `exact` off, from the int8 copy in memory (within about 0.002 of it, no file read): for
        choosing among rows whose chosen few are then scored exactly."""
        with self._lock:
            lab = np.asarray(labels, dtype=np.int64)
            dot = self._qv.exact_dot(lab, vec) if exact else self._qv.dot(lab, vec)
            return (dot + self._adjust(lab, account)).astype(np.float64)

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
            labels = self._scope_labels(q.account, q.prefixes)
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
