"""A query's names that most rows hold, left out of its second embedding (`common_names`)."""

from __future__ import annotations

import numpy as np
import pytest

from skald.actors.retriever.query_vectors import query_vectors
from skald.actors.text.common_names import COMMON_SHARE, blended, names_in, without_common_names
from skald.messages.index import IndexRow
from skald.runtime.models.embedders import HashEmbedder
from skald.store.index import Query, VectorIndex

SHARES = {"caroline": 0.5, "melanie": 0.45, "paris": 0.01, "lgbtq": 0.02, "research": 0.3}


def test_the_names_most_rows_hold_are_left_out_with_their_possessive() -> None:
    assert without_common_names("What did Caroline research?", SHARES) == "What did research?"
    assert without_common_names("What is Caroline's identity?", SHARES) == "What is identity?"
    assert without_common_names("What is Caroline’s identity?", SHARES) == "What is identity?"
    assert without_common_names("When did Melanie and Caroline go camping?", SHARES) == "When did and go camping?"


def test_rare_names_lower_case_words_and_the_first_word_stay() -> None:
    assert without_common_names("Would Caroline go to Paris?", SHARES) == "Would go to Paris?"  # Paris is rare
    assert without_common_names("What did she research?", SHARES) == "What did she research?"  # not capitalised
    assert without_common_names("Caroline went where?", SHARES) == "Caroline went where?"  # any sentence's first word
    assert without_common_names("What did Caroline research?", SHARES, share=0.6) == "What did Caroline research?"
    assert without_common_names("What did Caroline research?", {}) == "What did Caroline research?"


def test_a_query_of_nothing_but_common_names_is_kept_whole() -> None:
    assert without_common_names("Who is Caroline?", {**SHARES, "who": 1.0}) == "Who is Caroline?"
    assert without_common_names("And Caroline?", SHARES) == "And Caroline?"


def test_the_names_asked_about_are_the_capitalised_words_after_the_first() -> None:
    assert names_in("What did Caroline and Melanie's kids paint in Paris?") == ["Caroline", "Melanie", "Paris"]
    assert names_in("what did she paint?") == [] and names_in("Caroline?") == []


def test_blended_ranks_by_both_cosines_on_the_question_s_own_scale() -> None:
    rng = np.random.default_rng(3)
    a, b = (v / np.linalg.norm(v) for v in rng.normal(size=(2, 16)))
    rows = rng.normal(size=(50, 16))
    v = blended(a, b)
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-6
    assert list(np.argsort(-(rows @ v))) == list(np.argsort(-(rows @ a + rows @ b)))
    assert np.array_equal(blended(a, -a), a)  # nothing left of the sum: the question's own vector
    assert 0 < COMMON_SHARE < 1


def _rows(account: str, prefix: str, texts: list[str]) -> list[tuple[IndexRow, np.ndarray]]:
    rng = np.random.default_rng(len(texts))
    out = []
    for i, t in enumerate(texts):
        v = rng.normal(size=4).astype(np.float32)
        out.append((IndexRow(account=account, uri=f"{prefix}/t{i}.md", level=2, parent_uri=prefix,
                             context_type="memory", text=t), v / np.linalg.norm(v)))
    return out


def test_a_word_s_share_is_of_each_scope_s_rows_not_of_the_whole_index() -> None:
    """A name every turn of one user's memories holds is common there, however many other users'
    rows the index holds; the same name in one of a scope's hundred rows is not. A scope of every
    row takes the word's frequency as it is."""
    mine = "viking://user/u/memories/events"
    idx = VectorIndex(dim=4)
    idx.upsert_many([*_rows("a", mine, [f"Caroline: turn {i} about painting" for i in range(20)]),
                     *_rows("b", "viking://resources/x", [f"Another user's note {i}" for i in range(180)]),
                     *_rows("b", "viking://resources/y", ["Caroline once wrote this", *(["plain"] * 99)])])
    q = Query(account="a", prefixes=[mine])
    assert idx.word_shares("Caroline painting", [q], 0.1) == {"caroline": 1.0, "painting": 1.0}
    assert idx.word_shares("Caroline", [Query(account="b", prefixes=["viking://resources/y"])], 0.1) == {
        "caroline": pytest.approx(0.01)}  # 1 of its 100 rows
    assert idx.word_shares("Caroline", [Query(account="b", prefixes=["viking://resources/x"])], 0.2) == {
        "caroline": 0.0}  # 21 rows in all could not be a fifth of its 180: not worked out
    both = idx.word_shares("Caroline", [Query(account="b", prefixes=["viking://resources/y"]), q], 0.1)
    assert both == {"caroline": 1.0}  # the largest share of any scope asked about
    alone = VectorIndex(dim=4)
    alone.upsert_many(_rows("a", mine, ["Caroline: hi", "Caroline: bye", "Melanie: hello", "Melanie: yes"]))
    assert alone.word_shares("Caroline Melanie", [Query(account="a")], 0.1) == {"caroline": 0.5, "melanie": 0.5}


class _Counting(HashEmbedder):
    """The hashed embedder, counting its model calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    async def embed_query(self, text: str) -> np.ndarray:
        self.calls.append([text])
        return await super().embed_query(text)

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return await super().embed_queries(texts)


async def test_a_query_naming_a_common_name_is_ranked_by_both_vectors_in_one_call() -> None:
    """The question's vectors with and without the names most of the scope's rows hold, asked in
    one call, added; the queries made from it, and a query naming nothing common, embedded as they
    are."""
    emb = _Counting()
    idx = VectorIndex(emb.dim, emb.name)
    turns = ["Caroline: hey Mel!", "Melanie: hi Caroline", "Caroline: I researched adoption agencies",
             "Melanie: we went camping at the lake"]
    idx.upsert_many([(IndexRow(account="a", uri=f"viking://user/u/memories/t{i}.md", level=2,
                               parent_uri="viking://user/u/memories", context_type="memory", text=t),
                      await emb.embed_query(t)) for i, t in enumerate(turns)])
    emb.calls.clear()
    scope = [Query(account="a", prefixes=["viking://user/u/memories"])]
    [v] = await query_vectors(emb, idx, ["What did Caroline research?"], scope)
    assert emb.calls == [["What did Caroline research?", "What did research?"]]
    want = blended(await emb.embed_query("What did Caroline research?"), await emb.embed_query("What did research?"))
    assert np.allclose(v, want)
    emb.calls.clear()  # a comparative question's parts are about one name each on purpose: kept whole
    both = "What do Caroline and Melanie both research?"
    v0, v1 = await query_vectors(emb, idx, [both, "What does Caroline research?"], scope)
    assert emb.calls == [[both, "What does Caroline research?", "What do and both research?"]]
    assert np.allclose(v1, await emb.embed_query("What does Caroline research?"))
    emb.calls.clear()
    [v] = await query_vectors(emb, idx, ["What did Paris research?"], scope)  # no row holds "Paris"
    assert emb.calls == [["What did Paris research?"]]
    assert np.allclose(v, await emb.embed_query("What did Paris research?"))
