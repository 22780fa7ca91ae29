"""Hybrid ranking: reciprocal rank fusion of the vector and BM25 lists (no score calibration needed)."""

from __future__ import annotations

from collections.abc import Sequence

from skald.messages.index import IndexRow

RRF_K = 60  # the usual constant: damps the head so one list cannot dominate


def rrf(*lists: Sequence[tuple[IndexRow, float]], k: int = RRF_K) -> list[tuple[IndexRow, float]]:
    scores: dict[tuple[str, int], float] = {}
    rows: dict[tuple[str, int], IndexRow] = {}
    for ranked in lists:
        for rank, (row, _) in enumerate(ranked):
            key = (row.uri, row.level)
            rows[key] = row
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank + 1)
    return sorted(((rows[key], s) for key, s in scores.items()), key=lambda rs: (-rs[1], rs[0].uri))
