"""search.find: every parameter of docs/design/retrieval-api.md and its validation."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from skald.messages import errors
from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.worker import Worker
from skald.store.uri import Identity
from support.corpus import remember, write_files


@pytest.fixture
async def corpus(client: SkaldClient, skald: Worker) -> SkaldClient:
    docs = {
        "viking://resources/infra/k8s.md": "# Kubernetes\n\nPods restart when the liveness probe fails.",
        "viking://resources/infra/dns.md": "# DNS\n\nResolvers cache records until the TTL expires.",
        "viking://resources/cooking/bread0.md": "# Bread\n\nKnead the dough and let the yeast rise overnight.",
        "viking://resources/cooking/tea.md": "# Tea\n\nGreen tea brews at eighty degrees for two minutes.",
    }
    await write_files(client, docs)
    await remember(client, [("preferences", "I prefer green tea over coffee.")])
    # Age the bread file so time filters have something to cut (a move re-indexes and keeps mtime).
    ns = skald.host.actors["indexer"].ns  # type: ignore[union-attr]
    old = time.time() - 10 * 86400
    os.utime(ns.resolve("viking://resources/cooking/bread0.md", Identity()).path, (old, old))
    await client.call("fs.mv", {"from_uri": "viking://resources/cooking/bread0.md",
                                "to_uri": "viking://resources/cooking/bread.md"})
    return client


def all_hits(r: dict) -> list[dict]:
    return r["memories"] + r["resources"] + r["skills"]


async def test_find_shape_and_ranking(corpus: SkaldClient) -> None:
    r = await corpus.call("search.find", {"query": "liveness probe pods restart"})
    assert set(r) >= {"memories", "resources", "skills", "total"}
    assert r["resources"][0]["uri"] == "viking://resources/infra/k8s.md"
    assert r["total"] == len(all_hits(r)) <= 10
    scores = [h["score"] for h in all_hits(r)]
    assert all(h["level"] in (0, 1, 2) for h in all_hits(r))
    assert scores == sorted(scores, reverse=True) or len(r["memories"]) > 0


async def test_every_hit_says_why_it_matched_and_directories_carry_their_overview(corpus: SkaldClient) -> None:
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


async def test_target_uri_and_context_type(corpus: SkaldClient) -> None:
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


async def test_limit_node_limit_threshold_level(corpus: SkaldClient) -> None:
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


async def test_time_window_and_filter(corpus: SkaldClient) -> None:
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


async def test_provenance_read_content_and_filter_only(corpus: SkaldClient) -> None:
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
async def test_find_validation(corpus: SkaldClient, body: dict) -> None:
    with pytest.raises(errors.InvalidArgument):
        await corpus.call("search.find", body)


async def test_stats_count_queries(corpus: SkaldClient) -> None:
    await corpus.call("search.find", {"query": "tea"})
    await corpus.call("search.find", {"query": "tea", "target_uri": "viking://resources/empty-nothing"})
    s = await corpus.call("system.stats")
    rs = s["retrieval"]
    assert rs["total_queries"] >= 2 and rs["zero_result_queries"] >= 1 and 0 < rs["zero_result_rate"] < 1
    assert rs["max_score"] >= rs["avg_score"] >= rs["min_score"] and rs["avg_latency_ms"] > 0
    assert s["index"]["index"]["rows"] > 0


async def test_stats_count_every_path_and_keep_score_scales_apart(corpus: SkaldClient) -> None:
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


async def test_a_replica_whose_follower_died_reports_lag_and_never_serves_stale(skald: Worker,
                                                                                client: SkaldClient) -> None:
    """The index follower's consumer deleted on the server (what a dead node does to it): the replica
    reports lag > 0 within seconds from the stream's own last sequence, a read-your-writes find either
    waits, answers UNAVAILABLE (retried by the client) or sees the write, never stale rows, and the
    follower is recreated."""
    await client.write("viking://resources/rw/a.md", "Alpha apples grow in autumn orchards.")
    js = client.nc.jetstream(timeout=5.0)
    stream = stream_name(skald.cfg.prefix, "index")
    for ci in await js.consumers_info(stream):
        await js.delete_consumer(stream, ci.name)
    await client.write("viking://resources/rw/b.md", "Banana bread needs very ripe bananas.")
    seen_lag = 0
    for _ in range(40):
        retr = (await client.health()).actors["retriever"]
        seen_lag = max(seen_lag, retr["lag"])
        if seen_lag:
            break
        await asyncio.sleep(0.1)
    found = await client.find("banana bread", target_uri="viking://resources/rw", level=2)
    assert "viking://resources/rw/b.md" in [h.uri for h in found.resources]  # never stale
    for _ in range(100):
        retr = (await client.health()).actors["retriever"]
        if retr["lag"] == 0:
            break
        await asyncio.sleep(0.1)
    assert retr["lag"] == 0 and retr["stale_s"] == 0
    # nats-py sometimes re-creates a deleted ordered consumer by itself (no stall at all); when it
    # did not, the watchdog had to, and the stall was visible in health while it lasted.
    if retr["follower_restarts"]:
        assert seen_lag > 0
    print(f"lag seen {seen_lag}, retried {client.retried}, follower restarts {retr['follower_restarts']}")
