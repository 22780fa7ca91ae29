"""A search's query vectors. A question naming what most rows of its scope hold (a conversation's
speakers, `actors/text/common_names.py`) is embedded with and without those names at once and
ranked by both: on the five LoCoMo conversations of `bench/locomo.py`, evidence recall at 1,600
tokens 0.866 / 0.879 / 0.867 / 0.852 / 0.893 -> 0.884 / 0.906 / 0.876 / 0.846 / 0.894."""

from __future__ import annotations

import asyncio

import numpy as np

from skald.actors.kit.ports import Embedder
from skald.actors.text.common_names import COMMON_SHARE, blended, names_in, without_common_names
from skald.store.index import Query, VectorIndex


async def query_vectors(embedder: Embedder, index: VectorIndex, queries: list[str],
                        scopes: list[Query]) -> list[np.ndarray]:
    """Each query's vector. The first, the question as asked, when it names what most rows of a
    bucket's scope hold (`common_names`), is embedded with and without those names at once and
    ranked by both (`blended`). The queries made from it are embedded as they are: a comparative
    question's parts (`comparative.parts`) each ask about one of its names on purpose, and left
    without them the parts and the question became one query (LoCoMo 30 at 800 tokens: 0.788 ->
    0.766, three questions' evidence lost, "How do Jon and Gina both like to destress?" among them)."""
    if not queries:
        return []
    names = names_in(queries[0])
    shares = index.word_shares(" ".join(names), scopes, COMMON_SHARE) if names else {}
    without = [without_common_names(queries[0], shares), *queries[1:]]
    if without == queries:
        return list(await asyncio.gather(*(embedder.embed_query(q) for q in queries)))
    texts = list(dict.fromkeys([*queries, *without]))
    got = dict(zip(texts, await embedder.embed_queries(texts), strict=True))
    return [got[q] if w == q else blended(got[q], got[w]) for q, w in zip(queries, without, strict=True)]
