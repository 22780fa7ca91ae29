"""A row's approximate vector, the one the index chooses rows by before scoring the chosen few
exactly: int8 with a scale per row (`quantise`), or codes another part keeps (`Coded`: the graph
over 8-bit codes, whose codes serve so the index keeps no int8 copy of its own)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


def quantise(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 rows, float32 scale per row) with `q * scale` close to `mat`."""
    mat = np.asarray(mat, dtype=np.float32)
    scale = np.abs(mat).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.rint(mat / scale[:, None]).astype(np.int8)
    return q, scale.astype(np.float32)


class Coded(Protocol):
    """Approximate vectors of rows from elsewhere (the 8-bit graph's codes) in place of int8 ones:
    each call says which of the labels it had (`found`) and their values."""

    def dot(self, labels: np.ndarray, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def decode(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
