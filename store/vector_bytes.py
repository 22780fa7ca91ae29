"""A vector as bytes where it is kept for later, not searched: on the index stream (each row's) and
in document records (each section's, reused by a re-ingest).

Half precision: 768 bytes at 384 dimensions instead of float32's 1,536, about a fifth of what a
section row costs on the index stream and most of what its record costs. An embedding's components
are far inside float16's range and its relative precision (2^-11) moves a cosine between unit
vectors by about 1e-4, under what any ranking or threshold here can tell apart (the int8 copy the
index scores with already moves one by 0.002). The packed form starts with one marker byte, so its
length is odd and a float32 vector written before it (always a multiple of four) is still read as
such. A vector that float16 cannot hold (a component past 65,504) stays float32.
"""

from __future__ import annotations

import numpy as np

HALF = b"h"
_F16_MAX = 65_504.0


def pack(v: np.ndarray) -> bytes:
    """The vector's bytes to keep: float16 after the marker, or float32 when a component is too large."""
    v = np.asarray(v, dtype=np.float32)
    if v.size and float(np.abs(v).max()) >= _F16_MAX:
        return v.astype("<f4").tobytes()
    return HALF + v.astype("<f2").tobytes()


def unpack(data: bytes) -> np.ndarray:
    """float32 of what `pack` wrote, or of the float32 bytes rows and records held before it."""
    if len(data) % 2 == 1 and data[:1] == HALF:
        return np.frombuffer(data, dtype="<f2", offset=1).astype(np.float32)
    return np.frombuffer(data, dtype="<f4").astype(np.float32)
