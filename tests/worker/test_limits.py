"""Every limit answers with a typed refusal, and the worker stays healthy after each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from skald.runtime.client.api import SkaldClient

PART = {"type": "text", "text": "x"}
OVER_LIMIT: list[tuple[str, dict[str, Any], str]] = [
    ("sessions.add_message", {"session_id": "s", "role": "user", "parts": [PART] * 257}, "parts"),
    ("sessions.add_message", {"session_id": "s" * 129, "role": "user", "parts": [PART]}, "session_id"),
    ("search.search", {"query": "x", "mode": "context", "exclude_uris": ["viking://resources/a"] * 201},
     "exclude_uris"),
    ("search.search", {"query": "x", "mode": "context", "quotas": {"events": 1001}}, "quotas"),
    ("search.search", {"query": "x", "mode": "context", "max_tokens": 32_001}, "max_tokens"),
    ("search.search", {"query": "x", "mode": "context", "max_tokens": 63}, "max_tokens"),
    ("search.search", {"query": "x", "mode": "context", "rewrite_max_bullets": 21}, "rewrite_max_bullets"),
    ("search.recall", {"query": "x", "dedup_turns": 10_001}, "dedup_turns"),
    ("search.find", {"query": "x", "limit": 10_001}, "limit"),
    ("search.find", {"query": "q" * 20_001}, "query"),
    ("search.grep", {"uri": "viking://resources", "pattern": "p" * 4097}, "pattern"),
    ("search.grep", {"uri": "viking://resources", "pattern": "x", "node_limit": 100_001}, "node_limit"),
    ("search.grep", {"uri": "viking://resources", "pattern": "x", "before_context": 101}, "before_context"),
    ("fs.tree", {"uri": "viking://resources", "level_limit": 65}, "level_limit"),
    ("fs.read", {"uri": "viking://resources/" + "a" * 4100}, "uri"),
    ("sessions.list", {"limit": 10_001}, "limit"),
]


@pytest.mark.parametrize("op, body, field", OVER_LIMIT, ids=[f"{o}.{f}" for o, _, f in OVER_LIMIT])
async def test_over_the_limit_is_invalid_argument(client: SkaldClient, op: str, body: dict[str, Any],
                                                  field: str) -> None:
    resp, hdrs = await client.raw(op, msgspec.json.encode(body))
    assert resp.error and resp.error["code"] == "INVALID_ARGUMENT", resp
    assert field in resp.error["message"] or field in str(resp.error.get("details")), resp.error
    assert (await client.health()).status == "ok"


async def test_body_and_reply_size_limits(client: SkaldClient, skald: Any) -> None:
    resp, _ = await client.raw("fs.write", msgspec.json.encode({"uri": "viking://resources/big.md",
                                                                "content": "x" * (1024 * 1024)}))
    assert resp.error["code"] == "INVALID_ARGUMENT" and resp.error["details"]["max_bytes"] == 1024 * 1024
    big = Path(skald.cfg.data_dir) / "accounts" / "default" / "resources" / "huge.md"
    big.parent.mkdir(parents=True, exist_ok=True)
    big.write_text("y" * (9 * 1024 * 1024))  # larger than one NATS message can carry
    resp, _ = await client.raw("fs.read", msgspec.json.encode({"uri": "viking://resources/huge.md"}))
    assert resp.error["code"] == "INVALID_ARGUMENT" and "reply too large" in resp.error["message"]
    assert (await client.health()).status == "ok"


async def test_backpressure_is_unavailable_not_an_unbounded_queue(deploy: Any) -> None:
    import asyncio

    _, c = await deploy(max_concurrency=2)
    results = await asyncio.gather(*(c.raw("search.glob", msgspec.json.encode({"pattern": "**"}))
                                     for _ in range(60)), return_exceptions=True)
    codes = [r[0].error["code"] if r[0].error else "OK" for r in results if not isinstance(r, BaseException)]
    assert len(codes) == 60 and set(codes) <= {"OK", "UNAVAILABLE", "NOT_FOUND"}
