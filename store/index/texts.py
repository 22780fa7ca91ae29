"""Leaf rows' text kept in a file beside the index, not in the process: read back for the few rows
a reply serves, and when a snapshot is written or read.

A section or file row's text (what BM25 indexes and what a passage serves) was the largest part of
a row held in memory (about 0.5 KB of text as a Python string at 60 words a section). The keyword
postings are built from it once, at upsert; after that only served sections read it. So it is
appended to an unlinked temporary file (positions by label in two arrays) and read with `pread`:
the operating system's page cache keeps the hot part in memory, outside the process, and gives it
back under pressure. Replaced and removed texts leave garbage; the file is rewritten with only the
live texts when the garbage outgrows them (`compact`).

Each text is stored zstd-compressed with a dictionary (`Packer`): a section of a few hundred words
shares most of its vocabulary and phrasing with the others, which one text alone cannot exploit
(per text, plain zstd keeps 62% of the bytes; with a 32 KB dictionary trained on the heap's first
texts, 39%; 7.6 us to compress a 950-byte section, 2 us to read it back). The dictionary is trained
once, from the first megabyte of texts put (stored as they are until then), and kept for the heap's
life: a compaction and a snapshot copy the texts as stored, and a snapshot saves the dictionary
beside them. A stored text is told apart by zstd's frame magic, which valid UTF-8 cannot begin with.

A snapshot does not copy the texts: the file is only ever appended to between compactions, so the
snapshot takes it as it is, by a hard link to the open file (an `O_TMPFILE` file can be given a
name), with where each text is at that moment and how many leading bytes it relies on. The texts
are then on disk once, not twice (about 0.9 KB a section row). Where the link cannot be made
(another file system, no `O_TMPFILE`) the live texts are copied as before.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np
import zstandard

COMPACT_FROM = 64 << 20  # bytes of garbage below which the file is never rewritten
TRAIN_BYTES = 1 << 20  # texts put before the dictionary is trained from them
DICT_BYTES = 32 << 10
MIN_PACK = 64  # texts shorter than this are stored as they are
LEVEL = 3
_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first bytes: 0xb5 cannot follow '(' in UTF-8


class Packer:
    """A heap's dictionary compression: samples until trained, then one compressor (used under
    the heap's write lock) and a decompressor per reading thread (they are not thread-safe)."""

    def __init__(self, dictionary: bytes | None = None) -> None:
        self._samples: list[bytes | bytearray | memoryview] | None = [] if dictionary is None else None
        self._sampled = 0
        self.dictionary = dictionary
        self._c: zstandard.ZstdCompressor | None = None
        self._local = threading.local()
        if dictionary is not None:
            self._ready(dictionary)

    def _ready(self, dictionary: bytes) -> None:
        self.dictionary = dictionary
        self._d = zstandard.ZstdCompressionDict(dictionary)
        self._c = zstandard.ZstdCompressor(level=LEVEL, dict_data=self._d)

    def pack(self, data: bytes) -> bytes:
        """What to store for `data` (under the heap's write lock): compressed once trained, when smaller."""
        if self._c is None:
            self._sample(data)
            return data
        if len(data) < MIN_PACK:
            return data
        out = self._c.compress(data)
        return out if len(out) < len(data) else data

    def _sample(self, data: bytes) -> None:
        if self._samples is None or not data:
            return
        self._samples.append(data)
        self._sampled += len(data)
        if self._sampled < TRAIN_BYTES or len(self._samples) < 64:
            return
        samples, self._samples = self._samples, None
        try:
            trained = zstandard.train_dictionary(DICT_BYTES, samples, level=LEVEL)
        except zstandard.ZstdError:  # too little variety to train on: sample the next texts
            self._samples, self._sampled = [], 0
            return
        self._ready(trained.as_bytes())

    def unpack(self, data: bytes) -> str:
        if data[:4] != _MAGIC:
            return data.decode()
        d = getattr(self._local, "d", None)
        if d is None:
            if self.dictionary is None:
                raise ValueError("a compressed text without its dictionary")
            d = self._local.d = zstandard.ZstdDecompressor(dict_data=self._d)
        return d.decompress(data).decode()


class Frozen(NamedTuple):
    """Where the texts of a snapshot's labels are at one moment, in which file, and its length then."""

    offs: np.ndarray
    sizes: np.ndarray
    end: int
    file: BinaryIO


def _heap_file(directory: Path | None) -> BinaryIO:
    """An unnamed file that can later be given a name (`O_TMPFILE` without `O_EXCL`), or, where the
    system has none, an ordinary temporary file (its snapshots then copy)."""
    where = str(directory) if directory is not None else tempfile.gettempdir()
    try:
        fd = os.open(where, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):
        return tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 - held for the index's life
    return os.fdopen(fd, "w+b")


def _link(f: BinaryIO, path: Path) -> bool:
    """Give the open unnamed file `f` the name `path`; False where that cannot be done."""
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:  # with a directory descriptor, os.link is linkat with AT_SYMLINK_FOLLOW: /proc's link is followed
        os.link(f"/proc/self/fd/{f.fileno()}", path.name, dst_dir_fd=dir_fd)
        return True
    except (OSError, NotImplementedError):
        return False
    finally:
        os.close(dir_fd)


class TextHeap:
    """Texts by label in a file: `put` appends, `get` reads back, `drop` forgets."""

    def __init__(self, directory: Path | None = None, capacity: int = 1024) -> None:
        self._dir = directory
        self._f = _heap_file(directory)
        self._lock = threading.Lock()  # the write position; reads need none (pread)
        self.off = np.zeros(capacity, dtype=np.int64)
        self.size = np.full(capacity, -1, dtype=np.int32)  # bytes of each label's text, -1 for none
        self.end = 0
        self.live_bytes = 0
        self.packer = Packer()

    def grow(self, cap: int) -> None:
        old = self.off.shape[0]
        if cap <= old:
            return
        off = np.zeros(cap, dtype=np.int64)
        off[:old] = self.off
        size = np.full(cap, -1, dtype=np.int32)
        size[:old] = self.size
        self.off, self.size = off, size

    def put(self, label: int, text: str) -> None:
        with self._lock:
            data = self.packer.pack(text.encode())
            self._forget(label)
            if data:
                os.pwrite(self._f.fileno(), data, self.end)
            self.off[label], self.size[label] = self.end, len(data)
            self.end += len(data)
            self.live_bytes += len(data)

    def get(self, label: int) -> str:
        n = int(self.size[label]) if 0 <= label < self.size.shape[0] else -1
        if n <= 0:
            return ""
        return self.packer.unpack(os.pread(self._f.fileno(), n, int(self.off[label])))

    def drop(self, label: int) -> None:
        with self._lock:
            self._forget(label)

    def _forget(self, label: int) -> None:
        if self.size[label] > 0:
            self.live_bytes -= int(self.size[label])
        self.size[label] = -1

    def garbage(self) -> int:
        return self.end - self.live_bytes

    def _copy(self, offs: np.ndarray, sizes: np.ndarray, out: BinaryIO) -> np.ndarray:
        """The texts at (`offs`, `sizes`) written one after another to `out`, as stored (no decoding),
        in label order; where each now starts."""
        new = np.zeros(offs.shape[0], dtype=np.int64)
        pos, fd = 0, self._f.fileno()
        for label in np.flatnonzero(sizes > 0).tolist():
            out.write(os.pread(fd, int(sizes[label]), int(offs[label])))
            new[label] = pos
            pos += int(sizes[label])
        out.flush()
        return new

    def compact(self) -> None:
        """Rewrite the file with the live texts only, when its garbage outgrows them. The caller
        holds off writers (the index lock)."""
        if self.garbage() < max(COMPACT_FROM, self.live_bytes):
            return
        new = _heap_file(self._dir)
        with self._lock:
            live = self.size > 0
            self.off[live] = self._copy(self.off, self.size, new)[live]
            self._f.close()
            self._f, self.end = new, self.live_bytes

    def frozen(self, labels: int) -> Frozen:
        """Where the texts of labels below `labels` are now: `save` keeps them as they are at this
        moment, whatever is written after (the file is only appended to between compactions)."""
        with self._lock:
            return Frozen(self.off[:labels].copy(), self.size[:labels].astype(np.int64), self.end, self._f)

    def save(self, path: Path, at: Frozen) -> tuple[np.ndarray, int]:
        """The texts `frozen` located, at `path`: the heap's own file linked there while it is still
        the one they were in (it only grows after them), else a copy of them in label order. Their
        (offset, size) pairs (size -1 for a label with no text) and the bytes of `path` they lie in."""
        if at.file is self._f and _link(at.file, path):
            return np.stack([at.offs, at.sizes], axis=1), at.end
        with open(path, "wb") as out:
            table = np.stack([self._copy(at.offs, at.sizes, out), at.sizes], axis=1)
            return table, out.tell()

    def load(self, path: Path, table: np.ndarray, nbytes: int | None = None, dictionary: bytes | None = None) -> None:
        """Take the texts a snapshot saved (`save`'s file and pairs, and the dictionary they were
        packed with, if any) as this heap's: the first `nbytes` of the file (all of it when not
        given), which is all the pairs point into (a linked file may have grown after the
        snapshot, when it was still a live heap)."""
        if dictionary is not None:
            self.packer = Packer(dictionary)
        n = table.shape[0]
        self.grow(n)
        left = nbytes if nbytes is not None else path.stat().st_size
        with self._lock, open(path, "rb") as src:
            end = 0
            while left > 0 and (piece := src.read(min(1 << 22, left))):
                os.pwrite(self._f.fileno(), piece, end)
                end += len(piece)
                left -= len(piece)
            self.off[:n], self.size[:n] = table[:, 0], table[:, 1].astype(np.int32)
            self.end = end
            self.live_bytes = int(table[:, 1][table[:, 1] > 0].sum())
