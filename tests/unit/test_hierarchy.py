"""The descent core on synthetic trees with exact, hand-set scores (no NATS, no disk)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from skald.actors.retriever import hierarchy
from skald.messages.index import IndexRow
from skald.store.index import Query, VectorIndex

DIM = 160
Q = np.eye(DIM, dtype=np.float32)[0]


class Tree:
    """Rows whose cosine with Q is exactly the score given."""

    def __init__(self) -> None:
        self.index = VectorIndex(DIM, "synthetic")
        self.n = 1

    def add(self, uri: str, level: int, score: float, updated_at: float = 0.0, active: int = 0) -> None:
        v = np.zeros(DIM, dtype=np.float32)
        v[0] = score
        v[self.n] = math.sqrt(max(0.0, 1 - score * score))
        self.n += 1
        parent = uri.rsplit("/", 1)[0]
        self.index.upsert_many([(IndexRow(account="a", uri=uri, level=level, parent_uri=parent,
                                          context_type="resource", abstract=uri, updated_at=updated_at,
                                          active_count=active), v)])

    def dir(self, uri: str, score: float) -> None:
        self.add(uri, 0, score)
        self.add(uri, 1, score - 0.01)


def small_tree() -> Tree:
    t = Tree()
    t.dir("viking://resources/a", 0.875)
    t.add("viking://resources/a/x.md", 2, 0.25)
    t.dir("viking://resources/a/sub", 0.75)
    t.add("viking://resources/a/sub/deep.md", 2, 0.75)
    t.dir("viking://resources/b", 0.25)
    t.add("viking://resources/b/y.md", 2, 0.5)
    return t


async def run(t: Tree, **kw: object) -> hierarchy.Outcome:
    scope = Query(account="a", prefixes=["viking://resources"])
    collect = Query(account="a", prefixes=["viking://resources"], levels=frozenset({2}))
    return await hierarchy.descend(t.index, Q, "q", scope, collect, ["viking://resources"], hierarchy.Params(**kw))  # type: ignore[arg-type]


def scores(o: hierarchy.Outcome) -> dict[str, float]:
    return {r.uri.rsplit("/", 1)[1]: round(s, 4) for r, s in o.hits}


async def test_descent_enters_best_directories_first() -> None:
    o = await run(small_tree(), limit=3)
    first = [e["uri"] for e in o.trace["rounds"][0]]
    assert first == ["viking://resources/a", "viking://resources/a/sub", "viking://resources/b",
                     "viking://resources"]
    assert [r.uri for r, _ in o.hits][0] == "viking://resources/a/sub/deep.md"


@pytest.mark.parametrize("alpha,expect", [
    (1.0, {"deep.md": 0.75, "y.md": 0.5, "x.md": 0.25}),
    (0.5, {"deep.md": 0.75, "x.md": 0.5625, "y.md": 0.375}),
    (0.0, {"x.md": 0.875, "deep.md": 0.75, "y.md": 0.25}),
])
async def test_score_propagation(alpha: float, expect: dict[str, float]) -> None:
    assert scores(await run(small_tree(), limit=3, alpha=alpha)) == expect


async def test_zero_score_parent_does_not_dilute() -> None:
    t = Tree()
    t.add("viking://resources/top.md", 2, 0.625)  # child of the root, which starts at score 0
    assert scores(await run(t, limit=3, alpha=0.5)) == {"top.md": 0.625}


async def test_threshold_strict_unless_gte() -> None:
    strict = await run(small_tree(), limit=3, threshold=0.75)
    assert "deep.md" not in scores(strict)
    gte = await run(small_tree(), limit=3, threshold=0.75, score_gte=True)
    assert scores(gte) == {"deep.md": 0.75}


async def test_leaves_are_never_expanded() -> None:
    t = small_tree()
    # A row claiming a file as its parent must never be reached: files are terminal.
    t.add("viking://resources/a/x.md/ghost.md", 2, 0.99)
    o = await run(t, limit=5)
    entered = {e["uri"] for rnd in o.trace["rounds"] for e in rnd}
    assert "viking://resources/a/x.md" not in entered
    assert "ghost.md" not in scores(o)


async def test_convergence_by_unchanged_topk() -> None:
    t = Tree()
    t.dir("viking://resources/best", 0.5)
    t.add("viking://resources/best/win.md", 2, 0.96875)
    for i in range(24):  # many weak directories, each adding a leaf: the pool grows, the top-1 does not
        t.dir(f"viking://resources/d{i:02d}", 0.125)
        t.add(f"viking://resources/d{i:02d}/f.md", 2, 0.0625)
    o = await run(t, limit=1)
    assert o.trace["convergence"] == "topk_stable"
    assert o.trace["visited"] < 26
    assert o.hits[0][0].uri == "viking://resources/best/win.md"


async def test_convergence_by_stagnation() -> None:
    t = Tree()
    t.add("viking://resources/only.md", 2, 0.5)
    for i in range(30):  # empty directories: nothing new enters the pool
        t.dir(f"viking://resources/e{i:02d}", 0.25)
    o = await run(t, limit=5)
    assert o.trace["convergence"] == "stagnant" and o.trace["visited"] < 31
    assert scores(o) == {"only.md": 0.5}


async def test_rerank_replaces_scores_and_falls_back() -> None:
    async def flip(query: str, docs: list[str]) -> list[float]:
        return [1.0 - i * 0.1 for i in range(len(docs))][::-1]

    o = await hierarchy.descend(small_tree().index, Q, "q", Query(account="a", prefixes=["viking://resources"]),
                         Query(account="a",
                               levels=frozenset({2})), ["viking://resources"], hierarchy.Params(limit=3), flip)
    assert o.rerank_used and not o.rerank_fallback

    async def broken(query: str, docs: list[str]) -> list[float] | None:
        return None

    o2 = await hierarchy.descend(small_tree().index, Q, "q", Query(account="a", prefixes=["viking://resources"]),
                          Query(account="a",
                                levels=frozenset({2})), ["viking://resources"], hierarchy.Params(limit=3), broken)
    assert o2.rerank_fallback and scores(o2) == {"deep.md": 0.75, "y.md": 0.5, "x.md": 0.25}


def test_hotness_values() -> None:
    now = 1_800_000_000.0
    assert math.isclose(hierarchy.hotness(0, now, now), 0.5)
    assert hierarchy.hotness(1000, now, now) > 0.95
    assert hierarchy.hotness(10, now - 30 * 86400, now) < 0.1
    assert math.isclose(hierarchy.hotness(0, now - 7 * 86400, now), 0.25)
    assert hierarchy.hotness(5, None, now) == 0.0


async def test_hotness_blend_reorders() -> None:
    t = Tree()
    now = 1_800_000_000.0
    t.add("viking://resources/old.md", 2, 0.75, updated_at=now - 70 * 86400)
    t.add("viking://resources/hot.md", 2, 0.625, updated_at=now, active=50)
    assert [r.uri for r, _ in (await run(t, limit=2, now=now)).hits][0].endswith("old.md")
    assert [r.uri for r, _ in (await run(t, limit=2, now=now, hotness_alpha=0.5)).hits][0].endswith("hot.md")
