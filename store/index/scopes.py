"""Which rows a query may touch: a scope's URI prefixes as slices of the sorted key list, then its
levels, context types, times and predicate as masks over the row arrays."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import numpy as np

from skald.messages.index import IndexRow
from skald.store.index.rows import IndexRows
from skald.store.index.types import CONTEXT_TYPES, Query, scope_key


class IndexScopes(IndexRows):
    """Which rows a query may touch: prefixes as slices of the sorted scope keys, then masks for levels, types,
    times."""

    @staticmethod
    def _starts(account: str, prefixes: list[str] | None) -> tuple[str, ...]:
        """The scope keys a query's rows start with: the account, or its prefixes' subtrees."""
        if prefixes is None:
            return (f"{account}\x00",)
        starts = [scope_key(account, p.rstrip("/")) for p in prefixes]
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

    def _scope_labels(self, account: str, prefixes: list[str] | None) -> np.ndarray:
        """The scope's labels in scope order (its rows' keys sorted): `scan` keeps that order
        among rows written at the same moment."""
        return self._labels_in(self._ranges(account, prefixes))

    def _labels_in(self, ranges: list[tuple[int, int]]) -> np.ndarray:
        out: list[int] = []
        for lo, hi in ranges:
            out.extend(self._sorted_labels[lo:hi])
        return np.asarray(out, dtype=np.int64)

    def _whole(self, ranges: list[tuple[int, int]]) -> bool:
        """Whether a scope's `_ranges` are every row of the index (an index of one account, asked
        about all of it): then its live rows are the scope's, with no key looked at."""
        return ranges == [(0, len(self._sorted_keys))]

    def _scope_array(self, account: str, prefixes: list[str] | None) -> np.ndarray:
        """The scope's labels, in label order when the scope is every row (the live rows
        themselves, with no list of 100k ints turned into an array, 3.5 ms of an exact search
        over them), else in scope order."""
        ranges = self._ranges(account, prefixes)
        if self._whole(ranges):
            return np.flatnonzero(self._alive[: len(self._rows)])
        return self._labels_in(ranges)

    def _in_scope(self, row: IndexRow, account: str, prefixes: list[str] | None) -> bool:
        return scope_key(row.account, row.uri).startswith(self._starts(account, prefixes))

    def _allow_many(self, labels: np.ndarray, q: Query) -> np.ndarray:
        """`allows` for many labels at once: the numeric filters as array operations, then scope
        (one `startswith` over the scope keys) and the predicate for the rows still standing."""
        ok = self._mask(labels, q)
        if q.predicate is None and self._whole(self._ranges(q.account, q.prefixes)):
            return ok  # the scope is every row: a live row is in it (one string test a label saved)
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
