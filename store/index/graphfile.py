"""The float32 vectors inside a saved hnswlib graph, read back by label, so a snapshot does not
store every vector a second time beside the graph (1.5 KB a row of a 6 KB snapshot row).

hnswlib writes its level-0 block whole after a fixed header: one record per element, each its
level-0 links, then its vector, then its label. That layout is hnswlib's, not a documented
format, so it is checked before it is trusted: the header's sizes must agree with the dimension
and the file's length, and a sample of the vectors read must equal what the loaded graph itself
returns for those labels (`verify`). When either check fails the caller falls back to asking the
graph for every vector (`get_items`, about 40 us a row).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import hnswlib
import numpy as np

# offsetLevel0, max_elements, cur_element_count, size_data_per_element, label_offset, offsetData
# (size_t each), maxlevel (int), enterpoint_node (uint32), maxM, maxM0, M (size_t), mult (double),
# ef_construction (size_t): hnswlib's `saveIndex` header, then the level-0 block.
_HEADER = struct.Struct("<QQQQQQiIQQQdQ")


class UnexpectedLayout(ValueError):
    """The file does not have the layout this reader knows."""


class Layout(NamedTuple):
    """Where the elements are in a saved graph: the first's offset, how many, each one's size, and
    where in an element its vector and its label are."""

    start: int
    elements: int
    per: int
    data_at: int
    label_at: int


def layout(path: Path, dim: int) -> Layout:
    """The level-0 block's layout, checked against the dimension and the file's length."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise UnexpectedLayout("shorter than its header")
    _, max_elements, count, per, label_at, data_at = _HEADER.unpack(head)[:6]
    if not (count <= max_elements and data_at + dim * 4 == label_at and label_at + 8 == per
            and _HEADER.size + count * per <= size):
        raise UnexpectedLayout(f"sizes {per}/{label_at}/{data_at} for dimension {dim}, {count} elements")
    return Layout(_HEADER.size, count, per, data_at, label_at)


def positions(path: Path, dim: int, capacity: int, chunk: int = 65_536) -> np.ndarray:
    """Each label's element in the graph file (int32, -1 for a label it does not hold), read from
    the labels' column a chunk at a time."""
    lay = layout(path, dim)
    out = np.full(capacity, -1, dtype=np.int32)
    block = np.memmap(path, dtype=np.uint8, mode="r", offset=lay.start, shape=(lay.elements, lay.per))
    for i in range(0, lay.elements, chunk):
        part = np.asarray(block[i : i + chunk, lay.label_at : lay.label_at + 8])
        labels = part.copy().view("<u8")[:, 0].astype(np.int64)
        ok = labels < capacity
        out[labels[ok]] = np.arange(i, i + labels.size, dtype=np.int32)[ok]
    del block
    return out


def vectors(path: Path, dim: int, chunk: int = 16_384) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(labels, float32 vectors) of every element in the graph file, a chunk at a time, read
    through a memory map (the file is not loaded whole)."""
    start, count, per, data_at, label_at = layout(path, dim)
    block = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(count, per))
    for i in range(0, count, chunk):
        part = np.asarray(block[i : i + chunk])
        labels = part[:, label_at : label_at + 8].copy().view("<u8")[:, 0].astype(np.int64)
        yield labels, part[:, data_at : data_at + dim * 4].copy().view("<f4")
    del block


def verify(graph: hnswlib.Index, labels: np.ndarray, mat: np.ndarray) -> bool:
    """Whether the vectors read for a sample of labels are the graph's own."""
    if labels.size == 0:
        return True
    pick = np.linspace(0, labels.size - 1, num=min(16, labels.size)).astype(np.int64)
    got = np.asarray(graph.get_items(labels[pick].tolist(), return_type="numpy"), dtype=np.float32)
    return bool(np.array_equal(got, mat[pick]))
