"""Snapshot files written zstd-compressed: the rows (msgpack) and the keyword index's arrays.

Both are most of a snapshot beside the graph (about 0.9 KB a section row each) and compress well:
field names, URIs and digests repeat in the rows (864 -> 164 bytes a row at zstd level 1), labels
and term ids are small integers in the arrays (891 -> about 330). Level 1 compresses at about
0.7 GB/s and decompresses at 1.2 GB/s on this machine, so neither a save nor a cold start notices.

An arrays file is a little-endian uint32 header length, a msgpack header naming each array's dtype,
shape and compressed length, then one zstd frame per array. Each array is read back into memory
of its own, writable (the keyword index appends to and compacts the arrays it loads).
"""

from __future__ import annotations

import struct
from pathlib import Path

import msgspec
import numpy as np
import zstandard

LEVEL = 1


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


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    cctx = zstandard.ZstdCompressor(level=LEVEL)
    frames = {name: cctx.compress(np.ascontiguousarray(a).tobytes()) for name, a in arrays.items()}
    head = msgspec.msgpack.encode([_Entry(name, a.dtype.str, list(a.shape), len(frames[name]))
                                   for name, a in arrays.items()])
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(head)))
        f.write(head)
        for frame in frames.values():
            f.write(frame)


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays `write_arrays` wrote, each decompressed straight into an array of its own."""
    dctx = zstandard.ZstdDecompressor()
    out: dict[str, np.ndarray] = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<I", f.read(4))
        for e in msgspec.msgpack.decode(f.read(n), type=list[_Entry]):
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
