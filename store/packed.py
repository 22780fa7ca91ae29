"""Snapshot files written zstd-compressed: the rows (msgpack) and the keyword index's arrays.

Both are most of a snapshot beside the graph (about 0.9 KB a section row each) and compress well:
field names, URIs and digests repeat in the rows (864 -> 164 bytes a row at zstd level 1), labels
and term ids are small integers in the arrays (891 -> about 330). Level 1 compresses at about
0.7 GB/s and decompresses at 1.2 GB/s on this machine, so neither a save nor a cold start notices.

An arrays file is a little-endian uint32 header length, a msgpack header naming each array's dtype,
shape and compressed length, then one zstd frame per array. Each array is read back into memory
of its own, writable (the keyword index appends to and compacts the arrays it loads).

The largest arrays are written uncompressed instead (`write_mapped`), each at a page boundary, and
mapped back copy-on-write (`map_arrays`): a cold start then neither decompresses them nor fills
fresh memory with them, which on this machine's virtual memory cost up to 9 s at a million rows
(the first touch of new pages: 820 MB in 7.4 s in one process, 0.15 s in the next); the pages
come from the file as they are read, and a page the index writes becomes its own copy.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import msgspec
import numpy as np
import zstandard

LEVEL = 1
PAGE = 4096  # a mapped array starts at a page boundary
T = TypeVar("T")


class _Entry(msgspec.Struct, array_like=True):
    name: str
    dtype: str
    shape: list[int]
    size: int  # compressed bytes


def write_bytes(path: Path, data: bytes) -> None:
    path.write_bytes(zstandard.ZstdCompressor(level=LEVEL).compress(data))


def read_bytes(path: Path) -> bytes:
    with open(path, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as r:
        return r.read()


def _write_head(f: BinaryIO, entries: list[Any]) -> int:
    """The header every file here starts with: its length (uint32, little-endian), then the
    entries as msgpack. Returns the bytes written."""
    head = msgspec.msgpack.encode(entries)
    f.write(struct.pack("<I", len(head)))
    f.write(head)
    return 4 + len(head)


def _read_head(f: BinaryIO, kind: type[T]) -> tuple[T, int]:
    """`_write_head`'s entries as `kind` (a list of them), and the header's length in bytes."""
    (n,) = struct.unpack("<I", f.read(4))
    return msgspec.msgpack.decode(f.read(n), type=kind), 4 + n


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    cctx = zstandard.ZstdCompressor(level=LEVEL)
    frames = {name: cctx.compress(np.ascontiguousarray(a).tobytes()) for name, a in arrays.items()}
    with open(path, "wb") as f:
        _write_head(f, [_Entry(name, a.dtype.str, list(a.shape), len(frames[name])) for name, a in arrays.items()])
        for frame in frames.values():
            f.write(frame)


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays `write_arrays` wrote, each decompressed straight into an array of its own."""
    dctx = zstandard.ZstdDecompressor()
    out: dict[str, np.ndarray] = {}
    with open(path, "rb") as f:
        for e in _read_head(f, list[_Entry])[0]:
            frame = f.read(e.size)
            if len(frame) != e.size:
                raise ValueError(f"{path.name}: {e.name} is cut short")
            arr = np.empty(e.shape, dtype=np.dtype(e.dtype))
            view = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy arrays are buffers
            with dctx.stream_reader(frame) as r:
                got = 0
                while got < len(view):
                    k = r.readinto(view[got:])
                    if not k:
                        raise ValueError(f"{path.name}: {e.name} holds {got} of {len(view)} bytes")
                    got += k
                if r.read(1):
                    raise ValueError(f"{path.name}: {e.name} holds more than its shape")
            out[e.name] = arr
    return out


class _Mapped(msgspec.Struct, array_like=True):
    name: str
    dtype: str
    shape: list[int]
    offset: int  # from the first page after the header, a multiple of PAGE


def _pages(nbytes: int) -> int:
    """`nbytes` rounded up to whole pages."""
    return -(-nbytes // PAGE) * PAGE


def write_mapped(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Arrays as they are in memory, each at a page boundary, after a header naming them (the
    header's length first, as in `write_arrays`)."""
    entries, at = [], 0
    for name, a in arrays.items():
        entries.append(_Mapped(name, a.dtype.str, list(a.shape), at))
        at += _pages(a.nbytes)
    with open(path, "wb") as f:
        start = _pages(_write_head(f, entries))
        for e, a in zip(entries, arrays.values(), strict=True):
            f.seek(start + e.offset)
            f.write(memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
        f.truncate(start + at)


def map_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays `write_mapped` wrote, mapped copy-on-write: writable, and what is written stays
    in this process (the file, a snapshot's, never changes)."""
    with open(path, "rb") as f:
        entries, head = _read_head(f, list[_Mapped])
        size = f.seek(0, 2)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
    start = _pages(head)
    out: dict[str, np.ndarray] = {}
    for e in entries:
        dt = np.dtype(e.dtype)
        count = int(np.prod(e.shape, dtype=np.int64))
        at = start + e.offset
        if e.offset % PAGE or at + count * dt.itemsize > size:
            raise ValueError(f"{path.name}: {e.name} lies outside the file")
        arr = np.frombuffer(mm, dtype=dt, count=count, offset=at) if count else np.empty(0, dt)  # type: ignore[arg-type]
        out[e.name] = arr.reshape(e.shape)
    return out
