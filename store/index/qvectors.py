"""The index's own copies of each row's vector: int8 with a float32 scale per row in memory (388
bytes at 384 dimensions instead of 1,536), and float32 in a file beside the index.

hnswlib keeps a float32 copy of every vector it holds, so a float32 matrix here was the same
vectors twice in memory (3 KB of an 11 KB row). The int8 copy scores a selective scope exactly
enough to choose its best rows (per-row symmetric int8 moves a cosine by at most about 0.002 on
normalised 384-d vectors), and numpy turns int8 into float32 faster than float16 (a gather and
product over 8,000 rows: 1.3 ms, against 1.4 ms for float32 and 3.7 ms for float16, which numpy has
no fast conversion for), so exact scoring costs what it did. The rows a search returns are then
scored again from the float32 file (`exact`): a few `pread`s from the page cache, so a returned
score is the cosine itself, as before.

The float32 file would hold every vector a second time on disk beside the snapshot's graph, which
has them too (1.5 KB a row). So once a snapshot is written or loaded its graph file (or, where the
graph is kept split, its float16 vectors file, `graphfile.split`) is the base:
a row whose vector has not been written since is read from there (`rebase`; the labels' places
in it come from its label column, and a sample read both ways must agree before it is trusted),
and the file's bytes for those rows are given back to the file system (a hole punched). Writes
after it go to the file as before. The base is opened, not mapped: what is read stays out of the
process's resident memory, as `pread` from the file does.

Rows waiting for the graph (a large ingest it is still taking in) keep their float32 vector in
memory too, in `fresh` slots (`fresh.py`): the graph is given the exact vector, and the search over
the waiting rows scores them from it. A slot is released when its row is in the graph, its page
once none of its slots is held, so those copies never outlive the wait.

An index on the graph over 8-bit codes (`sqgraph.py`) keeps no int8 copy (0.39 GB at a million
rows): the graph's own codes are one, so a row the graph holds is scored and read approximately
from them (`Coded`), and a row it does not yet hold is fresh (waiting for it) or, while a new graph
is built, in the old one. A row found in none is read exactly from the file.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from skald.store.index import graphfile
from skald.store.index.approx import Coded, quantise
from skald.store.index.fresh import FreshRows

# Rows dequantised at a time into one float32 buffer (3 MB at 384-d): small enough to stay in the
# cache between the cast and the product. Over 100k contiguous rows: 7.0 ms at 2,048 against
# 10.6 ms at 16,384 (a 24 MB temporary written to memory and read back).
CHUNK = 2_048
# Up to this many rows are read one `pread` each in the order asked: finding runs of neighbours
# among a search's few rows (a sort, a diff, a list of runs) cost more than the syscalls it saved.
# The 36 rows a find rescores on the 8-bit graph at 315,000 rows (`bench/docs_scale.py`'s): 0.31
# ms a find before, 0.15 after (with the float16 conversion below).
FEW_ROWS = 64
_PUNCH = 0x03  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE


def _punch(fd: int, runs: list[tuple[int, int]]) -> None:
    """Give back the file system's blocks under byte ranges [start, end) of a file (its length
    kept, the ranges then read as zeros); nothing where the system cannot."""
    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    for start, end in runs:
        if fallocate(fd, _PUNCH, start, end - start) != 0:
            return


# Every float16 bit pattern's float32 value (256 KB): a gather from it converts float16 in half
# the time numpy's own cast takes (7 against 14 us for a find's 18 rows), bit for bit the same.
_F16 = np.arange(65_536, dtype=np.uint16).view(np.float16).astype(np.float32)


def _float32(elements: np.ndarray, lay: graphfile.Layout, width: int) -> np.ndarray:
    """Float32 vectors from a few of a base's elements as read (bytes, one row each): the vector's
    `width` bytes from `lay.data_at`, in `lay.dtype`."""
    raw = elements if lay.data_at == 0 and width == elements.shape[1] else \
        np.ascontiguousarray(elements[:, lay.data_at : lay.data_at + width])
    if np.dtype(lay.dtype) == np.dtype("<f2"):
        return _F16.take(raw.view("<u2"))
    return raw.view(lay.dtype).astype(np.float32)


class QuantisedVectors:
    """Vectors by label: int8 with a scale for every row (or codes kept elsewhere, `coded`),
    float32 for rows marked fresh."""

    def __init__(self, dim: int, capacity: int, directory: Path | None = None, coded: Coded | None = None) -> None:
        self.dim = dim
        self.coded = coded
        self.row_bytes = dim * 4
        self._file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 - float32 by label, for the index's life
        held = 0 if coded is not None else capacity  # rows of int8: none when the codes are elsewhere
        self.q = np.zeros((held, dim), dtype=np.int8)
        self.scale = np.zeros(held, dtype=np.float32)
        self.slot = np.full(capacity, -1, dtype=np.int64)  # label -> its fresh slot, -1 for none
        self.fresh: FreshRows | None = None  # float32 copies by slot, while any is held
        self.live = 0  # slots still held
        self._base: BinaryIO | None = None  # a snapshot's graph file, for the rows not written since
        self._lay: graphfile.Layout | None = None
        self.base_pos = np.full(capacity, -1, dtype=np.int32)  # label -> its element there, -1 for none
        self.written = np.zeros(capacity, dtype=np.int64)  # label -> the write count when last written
        self.writes = 0
        self._scratch = np.empty((0, dim), dtype=np.float32)

    def grow(self, cap: int) -> None:
        old = self.slot.shape[0]
        if cap <= old:
            return
        q, scale = self.q, self.scale
        if self.coded is None:
            q = np.zeros((cap, self.dim), dtype=np.int8)
            q[:old] = self.q
            scale = np.zeros(cap, dtype=np.float32)
            scale[:old] = self.scale
        slot = np.full(cap, -1, dtype=np.int64)
        slot[:old] = self.slot
        base_pos = np.full(cap, -1, dtype=np.int32)
        base_pos[:old] = self.base_pos
        written = np.zeros(cap, dtype=np.int64)
        written[:old] = self.written
        self.q, self.scale, self.slot, self.base_pos, self.written = q, scale, slot, base_pos, written

    def put(self, labels: np.ndarray, mat: np.ndarray, fresh: bool, in_base: bool = False) -> None:
        """Store rows (the last of a repeated label wins); with `fresh`, keep their float32 too;
        with `in_base`, their float32 is the graph file's about to be taken as the base (a load)."""
        mat = np.ascontiguousarray(mat, dtype=np.float32)
        if self.coded is None:
            self.q[labels], self.scale[labels] = quantise(mat)
        if not in_base:
            self._write(labels, mat)
        self.release(labels)
        if not fresh:
            return
        if self.fresh is None:
            self.fresh = FreshRows(self.dim)
        slots = self.fresh.add(mat)
        self.slot[labels] = slots  # a label twice in the batch: its last slot stays, the first is dead
        kept = self.slot[labels] == slots
        self.fresh.drop(slots[~kept])
        self.live += int(kept.sum())

    def release(self, labels: np.ndarray) -> None:
        """Rows now in the graph (or gone): their float32 copies are no longer needed."""
        if self.fresh is None or labels.size == 0:
            return
        slots = np.unique(self.slot[labels])
        slots = slots[slots >= 0]
        self.live -= int(slots.size)
        self.slot[labels] = -1
        self.fresh.drop(slots)
        if self.live <= 0:
            self.fresh, self.live = None, 0

    @staticmethod
    def _runs(labels: list[int] | np.ndarray) -> list[tuple[int, int]]:
        """(start, end) positions of the runs of consecutive labels, in the order given (array
        operations: a snapshot's base asks this of every row)."""
        a = np.asarray(labels, dtype=np.int64)
        if a.size == 0:
            return []
        cut = (np.flatnonzero(np.diff(a) != 1) + 1).tolist()
        return list(zip([0, *cut], [*cut, int(a.size)], strict=True))

    def _write(self, labels: np.ndarray, mat: np.ndarray) -> None:
        """The float32 rows into the file at their labels' places, one write per contiguous run;
        from now on they are read from the file, not the base."""
        fd, size, lab = self._file.fileno(), self.row_bytes, labels.tolist()
        for i, j in self._runs(lab):
            os.pwrite(fd, mat[i:j].tobytes(), lab[i] * size)
        self.writes += 1
        self.written[labels] = self.writes
        self.base_pos[labels] = -1

    def mark(self) -> int:
        """The write count now: a `rebase` onto a graph saved as of this moment leaves the rows
        written after it in the file."""
        return self.writes

    def rebase(self, path: Path, since: int, pos: np.ndarray, check: bool = True) -> bool:
        """Take the graph file at `path`, or a split graph's float16 vectors (saved when the write
        count was `since`; `pos` each label's element in it, from `graphfile.positions` or a load's
        read) as the base of the rows not written since, and give back their bytes in the file.
        With `check`, a sample of rows read from both must agree (the file's layout is hnswlib's,
        not a documented format); when it does not, or the file does not read, nothing changes."""
        try:
            lay = graphfile.base_layout(path, self.dim)
            f = open(path, "rb")  # noqa: SIM115 - held as the base until the next one
        except (OSError, graphfile.UnexpectedLayout):
            return False
        cap = self.slot.shape[0]
        pos = np.concatenate((pos[:cap], np.full(max(0, cap - pos.size), -1, dtype=np.int32)))
        pos[self.written > since] = -1
        if check:
            held = np.flatnonzero(pos >= 0)
            pick = held[np.linspace(0, held.size - 1, num=min(16, held.size)).astype(np.int64)] if held.size else held
            if not np.array_equal(self._read_base(f, lay, pos[pick]), self.read(pick)):
                f.close()
                return False
        old, self._base, self._lay, self.base_pos = self._base, f, lay, pos
        if old is not None:
            old.close()
        held, size = np.flatnonzero(pos >= 0), self.row_bytes
        _punch(self._file.fileno(), [(int(held[i]) * size, (int(held[j - 1]) + 1) * size) for i, j in self._runs(held)])
        return True

    def _read_base(self, f: BinaryIO, lay: graphfile.Layout, pos: np.ndarray) -> np.ndarray:
        """Float32 vectors of graph elements, read from the graph file (or a split one's float16
        vectors): a search's few one read each, more a run of neighbouring elements at a time."""
        fd, per, start = f.fileno(), lay.per, lay.start
        width = self.dim * np.dtype(lay.dtype).itemsize
        if pos.size <= FEW_ROWS:
            data = b"".join([os.pread(fd, per, start + p * per) for p in pos.tolist()])
            return _float32(np.frombuffer(data, dtype=np.uint8).reshape(pos.size, per), lay, width)
        order = np.argsort(pos, kind="stable")
        sp = pos[order].tolist()
        data = b"".join(os.pread(fd, per * (j - i), start + sp[i] * per) for i, j in self._runs(sp))
        elements = np.frombuffer(data, dtype=np.uint8).reshape(pos.size, per)
        out = np.empty((pos.size, self.dim), dtype=np.float32)  # cast as it is placed: no float32 temporary
        out[order] = np.ascontiguousarray(elements[:, lay.data_at : lay.data_at + width]).view(lay.dtype)
        return out

    def read(self, labels: np.ndarray) -> np.ndarray:
        """Float32 rows: from the base for rows not written since it was taken, else from the file."""
        if self._base is None:
            return self._read_file(labels)
        pos = self.base_pos[labels]
        assert self._lay is not None
        if pos.size and pos.min() >= 0:  # the usual case once a snapshot is the base: no masks
            return self._read_base(self._base, self._lay, pos)
        inb = pos >= 0
        if not inb.any():
            return self._read_file(labels)
        out = np.empty((labels.size, self.dim), dtype=np.float32)
        out[inb] = self._read_base(self._base, self._lay, pos[inb])
        if not inb.all():
            out[~inb] = self._read_file(labels[~inb])
        return out

    def _read_file(self, labels: np.ndarray) -> np.ndarray:
        """Float32 rows from the file (zeros for a label never written): a search's few one read
        each, more in label order so neighbours (a document's sections) come in one read each run."""
        fd, size = self._file.fileno(), self.row_bytes
        if labels.size <= FEW_ROWS:
            data = b"".join([os.pread(fd, size, lab * size).ljust(size, b"\0") for lab in labels.tolist()])
            return np.frombuffer(data, dtype=np.float32).reshape(labels.size, self.dim).copy()
        order = np.argsort(labels, kind="stable")
        lab = labels[order].tolist()
        data = b"".join(os.pread(fd, size * (j - i), lab[i] * size).ljust(size * (j - i), b"\0")
                        for i, j in self._runs(lab))
        out = np.empty((labels.size, self.dim), dtype=np.float32)
        out[order] = np.frombuffer(data, dtype=np.float32).reshape(labels.size, self.dim)
        return out

    def exact_dot(self, labels: np.ndarray, vec: np.ndarray) -> np.ndarray:
        """Each row's exact product with `vec` (for the few rows a search returns)."""
        return self.exact(labels) @ vec if labels.size else np.zeros(0, dtype=np.float32)

    def _fresh_of(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(which of the rows hold a fresh float32 copy, their slots), or None when none does."""
        if self.fresh is None:
            return None
        slots = self.slot[labels]
        f = slots >= 0
        return (f, slots[f]) if f.any() else None

    def exact(self, labels: np.ndarray) -> np.ndarray:
        """Float32 vectors of rows: the fresh copy where there is one, else the file's."""
        got = self._fresh_of(labels)
        if got is None:
            return self.read(labels)
        f, slots = got
        out = np.empty((labels.size, self.dim), dtype=np.float32)
        if not f.all():
            out[~f] = self.read(labels[~f])
        out[f] = self.fresh.rows(slots)  # type: ignore[union-attr]
        return out

    def approx(self, labels: np.ndarray) -> np.ndarray:
        """Float32 vectors of rows to choose among (scores of the rows chosen come from `exact`):
        the fresh copy where there is one, else dequantised."""
        got = self._fresh_of(labels)
        if self.coded is not None:
            out = np.empty((labels.size, self.dim), dtype=np.float32)
            rest = labels if got is None else labels[~got[0]]
            if rest.size:
                found, vals = self.coded.decode(rest)
                if not found.all():
                    vals[~found] = self.read(rest[~found])
                out[slice(None) if got is None else ~got[0]] = vals
        else:
            out = self.q[labels].astype(np.float32) * self.scale[labels, None]
        if got is not None:
            out[got[0]] = self.fresh.rows(got[1])  # type: ignore[union-attr]
        return out

    def dot(self, labels: np.ndarray, vec: np.ndarray) -> np.ndarray:
        """Each row's product with `vec`: exact for fresh rows (over a view of the block when all
        are fresh and their slots contiguous, as an ingest's rows are), from int8 for the rest."""
        got = self._fresh_of(labels)
        if got is not None and got[0].all():
            return self._dot_fresh(got[1], vec)
        if got is None:
            return self._dot_q(labels, vec)
        out = np.empty(labels.size, dtype=np.float32)
        out[~got[0]] = self._dot_q(labels[~got[0]], vec)
        out[got[0]] = self._dot_fresh(got[1], vec)
        return out

    def dot_all(self, n: int, vec: np.ndarray) -> np.ndarray:
        """`dot` of the first `n` labels, the int8 ones read in contiguous runs (no gather) and
        the fresh ones, an ingest's, not dequantised at all."""
        got = self._fresh_of(np.arange(n))
        if got is not None and got[0].all():
            return self._dot_fresh(got[1], vec)
        out = np.empty(n, dtype=np.float32)
        if got is None:
            self._dot_run(0, n, vec, out)
            return out
        held = np.flatnonzero(~got[0])  # the labels read from int8
        for i, j in self._runs(held):  # positions in `held` of each run of consecutive labels
            lo, hi = int(held[i]), int(held[j - 1]) + 1
            self._dot_run(lo, hi, vec, out[lo:hi])
        out[got[0]] = self._dot_fresh(got[1], vec)
        return out

    def _dot_q(self, labels: np.ndarray, vec: np.ndarray) -> np.ndarray:
        """Products of gathered int8 rows, dequantised CHUNK rows at a time into one buffer (or
        of their codes kept elsewhere, rows found in none read exactly)."""
        if self.coded is not None:
            found, out = self.coded.dot(labels, vec)
            if not found.all():
                out[~found] = self.read(labels[~found]) @ vec
            return out
        out = np.empty(labels.size, dtype=np.float32)
        buf = self._buffer(min(labels.size, CHUNK))
        for i in range(0, labels.size, CHUNK):
            part = labels[i : i + CHUNK]
            b = buf[: part.size]
            np.copyto(b, self.q[part], casting="unsafe")
            np.matmul(b, vec, out=out[i : i + part.size])
        out *= self.scale[labels]
        return out

    def _dot_run(self, lo: int, hi: int, vec: np.ndarray, out: np.ndarray) -> None:
        """Products of the contiguous int8 rows lo..hi into `out`."""
        if self.coded is not None:
            out[:] = self._dot_q(np.arange(lo, hi, dtype=np.int64), vec)
            return
        buf = self._buffer(min(hi - lo, CHUNK))
        for i in range(lo, hi, CHUNK):
            j = min(hi, i + CHUNK)
            b = buf[: j - i]
            np.copyto(b, self.q[i:j], casting="unsafe")
            np.matmul(b, vec, out=out[i - lo : j - lo])
        out *= self.scale[lo:hi]

    def _buffer(self, rows: int) -> np.ndarray:
        """A float32 scratch block of at least `rows` rows (kept: one allocation, not one a chunk)."""
        if self._scratch.shape[0] < rows:
            self._scratch = np.empty((rows, self.dim), dtype=np.float32)
        return self._scratch

    def _dot_fresh(self, slots: np.ndarray, vec: np.ndarray) -> np.ndarray:
        assert self.fresh is not None
        return self.fresh.dot(slots, vec)
