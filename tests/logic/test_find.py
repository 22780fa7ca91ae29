"""search.find: every parameter of docs/design/retrieval-api.md and its validation, on the in-memory
bus (the index replica following a real JetStream stream is `tests/worker/test_find.py`)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from skald.messages import errors
from skald.store.uri import Identity
from support.corpus import remember, write_files
from support.memory_deploy import MemoryDeployment, memory_deployment


@pytest.fixture
async def corpus(tmp_path: Path) -> AsyncIterator[MemoryDeployment]:
    docs = {
        "viking://resources/infra/k8s.md": "# Kubernetes\n\nPods restart when the liveness probe fails.",
        "viking://resources/infra/dns.md": "# DNS\n\nResolvers cache records until the TTL expires.",
        "viking://resources/cooking/bread0.md": "# Bread\n\nKnead the dough and let the yeast rise overnight.",
        "viking://resources/cooking/tea.md": "# Tea\n\nGreen tea brews at eighty degrees for two minutes.",
    }
    async with memory_deployment(tmp_path / "data") as d:
        await write_files(d, docs)  # type: ignore[arg-type]
        await remember(d, [("preferences", "I prefer green tea over coffee.")])  # type: ignore[arg-type]
        # Age the bread file so time filters have something to cut (a move re-indexes and keeps mtime).
        old = time.time() - 10 * 86400
        os.utime(d.ns.resolve("viking://resources/cooking/bread0.md", Identity()).path, (old, old))
        await d.call("fs.mv", {"from_uri": "viking://resources/cooking/bread0.md",
                               "to_uri": "viking://resources/cooking/bread.md"})
        yield d


def all_hits(r: dict) -> list[dict]:
    return r["memories"] + r["resources"] + r["skills"]


async def test_find_shape_and_ranking(corpus: MemoryDeployment) -> None:
    r = await corpus.call("search.find", {"query": "liveness probe pods restart"})
    assert set(r) >= {"memories", "resources", "skills", "total"}
    assert r["resources"][0]["uri"] == "viking://resources/infra/k8s.md"
    assert r["total"] == len(all_hits(r)) <= 10
    scores = [h["score"] for h in all_hits(r)]
    assert all(h["level"] in (0, 1, 2) for h in all_hits(r))
    assert scores == sorted(scores, reverse=True) or len(r["memories"]) > 0


async def test_a_leaf_hit_carries_its_abstract_though_the_index_keeps_it_out_of_the_row(
        corpus: MemoryDeployment) -> None:
    """A leaf row's abstract is kept in a file beside the index, not on the row a search returns
    (about 0.5 KB a row less held); every reply serving a leaf reads it back: find, a find that
    only filters, and list search."""
    k8s = "viking://resources/infra/k8s.md"
    held = corpus.retriever.index.get("default", k8s, 2)  # type: ignore[attr-defined]
    assert held is not None and "liveness probe" in held.abstract
    r = await corpus.call("search.find", {"query": "liveness probe pods restart"})
    assert [h["abstract"] for h in r["resources"] if h["uri"] == k8s] == [held.abstract]
    listed = await corpus.call("search.find", {"query": "", "target_uri": "viking://resources/infra"})
    assert [h["abstract"] for h in all_hits(listed) if h["uri"] == k8s] == [held.abstract]
    for mode in ("keywords", "semantic"):
        s = await corpus.call("search.search", {"query": "liveness probe pods restart", "search_type": mode})
        assert [h["abstract"] for h in all_hits(s) if h["uri"] == k8s] == [held.abstract], mode


async def test_every_hit_says_why_it_matched_and_directories_carry_their_overview(corpus: MemoryDeployment) -> None:
    """Seed 004's `match_reason` (how the hit was found and which of the query's words its text
    holds, as the query writes them) and `overview` (a directory's L1 text, beside its abstract)."""
    r = await corpus.call("search.find", {"query": "why do pods restart?"})
    top = r["resources"][0]
    assert top["uri"] == "viking://resources/infra/k8s.md" and "overview" not in top
    assert top["match_reason"] == "semantic and keywords (pods, restart)"
    assert all(h["match_reason"].startswith("semantic") for h in all_hits(r))
    dirs = [h for h in all_hits(r) if h["level"] in (0, 1)]
    assert dirs, "the corpus's directories are among the hits"
    for h in dirs:
        node = h["uri"].rsplit("/", 1)[0]
        shown = await corpus.call("fs.overview", {"uri": node})
        assert h["overview"] == shown["content"]
    kw = await corpus.call("search.search", {"query": "liveness probe", "search_type": "keywords", "level": 2})
    assert kw["resources"][0]["match_reason"] == "keywords (liveness, probe)"
    listed = await corpus.call("search.find", {"query": "", "target_uri": "viking://resources/infra"})
    assert all_hits(listed) and not any(h.get("match_reason") for h in all_hits(listed))


async def test_target_uri_and_context_type(corpus: MemoryDeployment) -> None:
    r = await corpus.call("search.find", {"query": "tea", "target_uri": "viking://resources/cooking"})
    assert all(h["uri"].startswith("viking://resources/cooking") for h in all_hits(r)) and all_hits(r)
    r = await corpus.call("search.find", {"query": "tea", "target_uri": ["viking://resources/infra",
                                                                         "viking://~/memories"]})
    assert all_hits(r) and all(h["uri"].startswith(("viking://resources/infra", "viking://user/default/memories"))
                               for h in all_hits(r))
    r = await corpus.call("search.find", {"query": "tea", "context_type": "memory"})
    assert r["memories"] and not r["resources"]
    r = await corpus.call("search.find", {"query": "tea", "context_type": ["memory", "resource"]})
    assert r["memories"] and r["resources"]


async def test_limit_node_limit_threshold_level(corpus: MemoryDeployment) -> None:
    r = await corpus.call("search.find", {"query": "tea", "limit": 2})
    assert r["total"] == 2
    r = await corpus.call("search.find", {"query": "tea", "limit": 2, "node_limit": 3})
    assert r["total"] == 3
    r = await corpus.call("search.find", {"query": "tea", "score_threshold": 0.2})
    assert all(h["score"] > 0.2 for h in all_hits(r))
    r = await corpus.call("search.find", {"query": "tea", "level": "0,1"})
    assert all_hits(r) and all(h["level"] in (0, 1) for h in all_hits(r))
    assert all(h["uri"].endswith(("/.abstract.md", "/.overview.md")) for h in all_hits(r))
    r = await corpus.call("search.find", {"query": "tea", "level": 2})
    assert all(h["level"] == 2 for h in all_hits(r))


async def test_time_window_and_filter(corpus: MemoryDeployment) -> None:
    r = await corpus.call("search.find", {"query": "bread dough", "since": "2d"})
    assert "viking://resources/cooking/bread.md" not in [h["uri"] for h in all_hits(r)]
    r = await corpus.call("search.find", {"query": "bread dough", "until": "5d", "level": 2})
    assert [h["uri"] for h in all_hits(r)] == ["viking://resources/cooking/bread.md"]
    r = await corpus.call("search.find", {"query": "bread", "since": "2000-01-01", "time_field": "created_at"})
    assert all_hits(r)
    r = await corpus.call("search.find", {"query": "tea", "filter": {"category": "preferences", "level": 2}})
    assert [h["context_type"] for h in all_hits(r)] == ["memory"]
    r = await corpus.call("search.find", {"query": "tea", "filter": {"op": "must", "field": "level", "conds": [2]}})
    assert all(h["level"] == 2 for h in all_hits(r))


async def test_provenance_read_content_and_filter_only(corpus: MemoryDeployment) -> None:
    r = await corpus.call("search.find", {"query": "DNS resolvers", "include_provenance": True,
                                          "read_content": True, "limit": 1})
    assert r["provenance"]["mode"] == "quick" and "targets" in r["provenance"]
    assert r["resources"][0]["content"].startswith("# DNS")
    r = await corpus.call("search.find", {"context_type": "memory", "level": 2})
    assert len(r["memories"]) == 1 and r["memories"][0]["score"] == 0.0


@pytest.mark.parametrize("body", [
    {"query": "x", "level": 3},
    {"query": "x", "level": "a,b"},
    {"query": "x", "tags": ["novalue"]},
    {"query": "x", "tags": ["a=b=c"]},
    {"query": "x", "since": "yesterday"},
    {"query": "x", "since": "1d", "until": "3d"},
    {"query": "x", "time_field": "mtime"},
    {"query": "x", "context_type": "document"},
    {"query": "x", "filter": {"nosuchfield": 1}},
    {"query": "x", "filter": {"level": {"near": 1}}},
    {"query": "x", "image_url": "data:image/png;base64,AAAA"},
    {"query": "x", "limit": 0},
    {"query": "x", "events_time_decay_protection": "7y"},
    {"query": "x", "target_uri": "https://example.com"},
    {"query": "x", "target_uri": "viking://user/memories"},
])
async def test_find_validation(corpus: MemoryDeployment, body: dict) -> None:
    with pytest.raises(errors.InvalidArgument):
        await corpus.call("search.find", body)


async def test_stats_count_queries(corpus: MemoryDeployment) -> None:
    await corpus.call("search.find", {"query": "tea"})
    await corpus.call("search.find", {"query": "tea", "target_uri": "viking://resources/empty-nothing"})
    s = await corpus.call("system.stats")
    rs = s["retrieval"]
    assert rs["total_queries"] >= 2 and rs["zero_result_queries"] >= 1 and 0 < rs["zero_result_rate"] < 1
    assert rs["max_score"] >= rs["avg_score"] >= rs["min_score"] and rs["avg_latency_ms"] > 0
    assert s["index"]["index"]["rows"] > 0


async def test_stats_count_every_path_and_keep_score_scales_apart(corpus: MemoryDeployment) -> None:
    before = (await corpus.call("system.stats"))["retrieval"]
    await corpus.call("search.find", {"query": "tea"})
    await corpus.call("search.search", {"query": "tea", "search_type": "keywords"})
    await corpus.call("search.search", {"query": "tea", "mode": "context"})
    await corpus.call("search.recall", {"query": "tea"})
    rs = (await corpus.call("system.stats"))["retrieval"]
    grew = {p: rs["by_path"].get(p, 0) - before["by_path"].get(p, 0) for p in ("find", "search", "context")}
    assert grew == {"find": 1, "search": 1, "context": 2}, grew
    assert rs["by_signal"]["bm25"]["count"] >= 1 and rs["by_signal"]["bm25"]["max"] > 1.0  # BM25's own scale
    assert rs["max_score"] <= 1.05 + 1e-6  # the top-level figures are (lifted) similarities only
