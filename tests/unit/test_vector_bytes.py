"""Vectors kept for later (index stream rows, document records) in half precision."""

from __future__ import annotations

import numpy as np

from skald.store import vector_bytes


def _unit(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_half_precision_keeps_cosines_and_halves_the_bytes() -> None:
    rng = np.random.default_rng(3)
    vecs, query = _unit(rng, 200), _unit(rng, 1)[0]
    packed = [vector_bytes.pack(v) for v in vecs]
    assert all(len(p) == 1 + 384 * 2 for p in packed)
    back = np.stack([vector_bytes.unpack(p) for p in packed])
    assert back.dtype == np.float32
    assert np.abs(back @ query - vecs @ query).max() < 1e-3
    assert np.array_equal(np.argsort(-(back @ query))[:10], np.argsort(-(vecs @ query))[:10])


def test_float32_bytes_written_before_are_still_read() -> None:
    v = _unit(np.random.default_rng(4), 1)[0]
    old = v.astype("<f4").tobytes()
    assert np.array_equal(vector_bytes.unpack(old), v)


def test_a_vector_half_precision_cannot_hold_stays_float32() -> None:
    v = np.array([1.0, 70_000.0, -3.5], dtype=np.float32)
    packed = vector_bytes.pack(v)
    assert len(packed) == 12
    assert np.array_equal(vector_bytes.unpack(packed), v)
