"""The hashed embedder's vectors are its definition: each feature adds +1 or -1 (bit 16 of its
CRC-32) at the dimension its CRC-32 picks, the sum normalised; a text with no feature is a unit
vector of its own. Stored indexes and fitted calibrations depend on these exact numbers, so a
faster way of summing must give the same bits."""

from __future__ import annotations

import random
import zlib

import numpy as np

from skald.runtime.models.embedders import HashEmbedder, hashed_features


def by_definition(text: str, dim: int = 384) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    for f in hashed_features(text):
        h = zlib.crc32(f.encode())
        v[h % dim] += 1.0 if (h >> 16) & 1 else -1.0
    n = float(np.linalg.norm(v))
    if n == 0.0:
        v[zlib.crc32(text.encode("utf-8", "surrogatepass")) % dim] = 1.0
        return v
    return v / n


def test_vectors_are_the_definitions_bit_for_bit() -> None:
    rng = random.Random(5)
    words = ["restart", "gateway", "node-7", "E1234", "服务器", "重启", "the", "Über"]
    texts = ["", "!!!", "one", "服务器重启", *(" ".join(rng.choices(words, k=rng.randint(1, 300))) for _ in range(200))]
    emb = HashEmbedder()
    for text in texts:
        got = emb.embed_sync(text)
        assert got.dtype == np.float32 and got.shape == (emb.dim,)
        assert np.array_equal(got, by_definition(text)), text
