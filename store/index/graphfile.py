"""The float32 vectors inside a saved hnswlib graph, read back by label, so a snapshot does not
store every vector a second time beside the graph (1.5 KB a row of a 6 KB snapshot row); and the
graph kept on disk split in two, its links and labels in one file and its vectors in half
precision in another, since every vector the index holds came off the index stream in float16.

A vector written to the stream is float16 (`store/vector_bytes.py`), so the float32 vectors in the
graph are float16 values held in twice the bytes: a snapshot writes them as float16 (768 bytes a
row at 384 dimensions instead of 1,536) when every one converts back exactly, and the whole graph
as hnswlib saved it otherwise (vectors written before float16 went on the stream). hnswlib loads
only its own file, so a load puts the two parts back together into an unnamed file in memory
first (`assembled`), gone once the graph is read.

hnswlib writes its level-0 block whole after a fixed header: one record per element, each its
level-0 links, then its vector, then its label. That layout is hnswlib's, not a documented
format, so it is checked before it is trusted: the header's sizes must agree with the dimension
and the file's length, and a sample of the vectors read must equal what the loaded graph itself
returns for those labels (`verify`). When either check fails the caller falls back to asking the
graph for every vector (`get_items`, about 40 us a row).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

import hnswlib
import numpy as np

# offsetLevel0, max_elements, cur_element_count, size_data_per_element, label_offset, offsetData
# (size_t each), maxlevel (int), enterpoint_node (uint32), maxM, maxM0, M (size_t), mult (double),
# ef_construction (size_t): hnswlib's `saveIndex` header, then the level-0 block.
_HEADER = struct.Struct("<QQQQQQiIQQQdQ")


class UnexpectedLayout(ValueError):
    """The file does not have the layout this reader knows."""


GRAPH = "graph.bin"  # the graph as hnswlib saved it
LINKS = "graph.links"  # the same without the level-0 vectors
HALVES = "vectors.f16"  # those vectors, float16, in element order


class Layout(NamedTuple):
    """Where the elements are in a saved graph (or one of its two parts): the first's offset, how
    many, each one's size, where in an element its vector (-1: none) and its label (-1: none) are,
    and the vector's type."""

    start: int
    elements: int
    per: int
    data_at: int
    label_at: int
    dtype: str = "<f4"


def layout(path: Path, dim: int, split: bool = False) -> Layout:
    """The level-0 block's layout, checked against the dimension and the file's length; with
    `split`, of a links file (hnswlib's header, each element without its vector)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise UnexpectedLayout("shorter than its header")
    _, max_elements, count, per, label_at, data_at = _HEADER.unpack(head)[:6]
    stored = per - dim * 4 if split else per
    if not (count <= max_elements and data_at + dim * 4 == label_at and label_at + 8 == per
            and _HEADER.size + count * stored <= size):
        raise UnexpectedLayout(f"sizes {per}/{label_at}/{data_at} for dimension {dim}, {count} elements")
    if split:
        return Layout(_HEADER.size, count, stored, -1, data_at, "")
    return Layout(_HEADER.size, count, per, data_at, label_at)


def halves_layout(path: Path, dim: int, elements: int | None = None) -> Layout:
    """The float16 vectors file's layout (one vector after another), checked against its length."""
    size = path.stat().st_size
    if size % (dim * 2) or (elements is not None and size != elements * dim * 2):
        raise UnexpectedLayout(f"{size} bytes of float16 vectors for dimension {dim}, {elements} elements")
    return Layout(0, size // (dim * 2), dim * 2, 0, -1, "<f2")


def base_layout(path: Path, dim: int) -> Layout:
    """The layout of a file the index reads vectors from: a whole graph, or a split one's halves."""
    return halves_layout(path, dim) if path.name == HALVES else layout(path, dim)


def saved(directory: Path) -> tuple[Path, Path | None]:
    """(the graph file, the float16 vectors file or None) of a snapshot: split, or whole."""
    links = directory / LINKS
    return (links, directory / HALVES) if links.exists() else (directory / GRAPH, None)


def split(path: Path, dim: int, chunk: int = 16_384) -> bool:
    """Split the graph hnswlib saved at `path` into its links and its float16 vectors beside it
    and remove it; False (the graph left whole) when a vector is not exactly a float16 value."""
    lay = layout(path, dim)
    if lay.elements == 0:
        return False  # nothing to halve
    links, halves = path.with_name(LINKS), path.with_name(HALVES)
    block = np.memmap(path, dtype=np.uint8, mode="r", offset=lay.start, shape=(lay.elements, lay.per))
    end = lay.data_at + dim * 4
    try:
        with open(path, "rb") as src, open(links, "wb") as lf, open(halves, "wb") as vf:
            lf.write(src.read(lay.start))
            for i in range(0, lay.elements, chunk):
                part = np.asarray(block[i : i + chunk])
                mat = part[:, lay.data_at : end].copy().view("<f4")
                half = mat.astype("<f2")
                if not np.array_equal(half.astype("<f4"), mat):
                    raise UnexpectedLayout("a vector is not a float16 value")
                lf.write(np.concatenate((part[:, : lay.data_at], part[:, end:]), axis=1).data)
                vf.write(half.data)
            src.seek(lay.start + lay.elements * lay.per)
            shutil.copyfileobj(src, lf)  # the upper levels' links, as they were
    except UnexpectedLayout:
        links.unlink(missing_ok=True)
        halves.unlink(missing_ok=True)
        return False
    finally:
        del block
    path.unlink()
    return True


def _scratch(where: Path | None) -> BinaryIO:
    """An unnamed file in memory (`memfd_create`), else one in `where`: a 200,000-row graph (340
    MB) was written in 0.30 s there against 0.89 s to a temporary file on this machine's disk."""
    try:
        return os.fdopen(os.memfd_create("skald-graph"), "w+b")
    except (AttributeError, OSError):
        return tempfile.TemporaryFile(dir=where)  # noqa: SIM115 - closed by the caller's block


@contextlib.contextmanager
def assembled(links: Path, halves: Path, dim: int, where: Path | None, chunk: int = 16_384) -> Iterator[str]:
    """A path hnswlib can load: the split graph put back together in an unnamed file (in memory,
    else in `where`; its name is the process's descriptor link), gone when the block ends."""
    lay = layout(links, dim, split=True)
    vlay = halves_layout(halves, dim, lay.elements)
    full = lay.per + dim * 4
    at = lay.label_at  # where the vector goes: after the links, before the label
    lmap = np.memmap(links, dtype=np.uint8, mode="r", offset=lay.start, shape=(lay.elements, lay.per))
    vmap = np.memmap(halves, dtype="<f2", mode="r", shape=(vlay.elements, dim))
    with _scratch(where) as out, open(links, "rb") as src:
        out.write(src.read(lay.start))
        for i in range(0, lay.elements, chunk):
            lpart = np.asarray(lmap[i : i + chunk])
            buf = np.empty((lpart.shape[0], full), dtype=np.uint8)
            buf[:, :at] = lpart[:, :at]
            buf[:, at : at + dim * 4] = np.asarray(vmap[i : i + chunk], dtype="<f4").view(np.uint8)
            buf[:, at + dim * 4 :] = lpart[:, at:]
            out.write(buf.data)
        src.seek(lay.start + lay.elements * lay.per)
        shutil.copyfileobj(src, out)
        out.flush()
        del lmap, vmap
        yield f"/proc/self/fd/{out.fileno()}"


def positions(path: Path, dim: int, capacity: int, chunk: int = 65_536) -> np.ndarray:
    """Each label's element in the graph file, whole or its links (int32, -1 for a label it does
    not hold), read from the labels' column a chunk at a time."""
    lay = layout(path, dim, split=path.name == LINKS)
    out = np.full(capacity, -1, dtype=np.int32)
    block = np.memmap(path, dtype=np.uint8, mode="r", offset=lay.start, shape=(lay.elements, lay.per))
    for i in range(0, lay.elements, chunk):
        part = np.asarray(block[i : i + chunk, lay.label_at : lay.label_at + 8])
        labels = part.copy().view("<u8")[:, 0].astype(np.int64)
        ok = labels < capacity
        out[labels[ok]] = np.arange(i, i + labels.size, dtype=np.int32)[ok]
    del block
    return out


def vectors(path: Path, dim: int, halves: Path | None = None,
            chunk: int = 16_384) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(labels, float32 vectors) of every element in the graph file (or its links and `halves`),
    a chunk at a time, read through a memory map (the file is not loaded whole)."""
    lay = layout(path, dim, split=halves is not None)
    block = np.memmap(path, dtype=np.uint8, mode="r", offset=lay.start, shape=(lay.elements, lay.per))
    vmap = None
    if halves is not None:
        vmap = np.memmap(halves, dtype="<f2", mode="r", shape=(halves_layout(halves, dim, lay.elements).elements, dim))
    for i in range(0, lay.elements, chunk):
        part = np.asarray(block[i : i + chunk])
        labels = part[:, lay.label_at : lay.label_at + 8].copy().view("<u8")[:, 0].astype(np.int64)
        if vmap is not None:
            yield labels, np.asarray(vmap[i : i + chunk], dtype=np.float32)
        else:
            yield labels, part[:, lay.data_at : lay.data_at + dim * 4].copy().view("<f4")
    del block, vmap


def verify(graph: hnswlib.Index, labels: np.ndarray, mat: np.ndarray) -> bool:
    """Whether the vectors read for a sample of labels are the graph's own."""
    if labels.size == 0:
        return True
    pick = np.linspace(0, labels.size - 1, num=min(16, labels.size)).astype(np.int64)
    got = np.asarray(graph.get_items(labels[pick].tolist(), return_type="numpy"), dtype=np.float32)
    return bool(np.array_equal(got, mat[pick]))
