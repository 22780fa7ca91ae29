"""search(mode="context") on the wire: garbage on its subjects, byte-identical replies of recall and
search, keyword-only candidates and the in-process relay, over NATS (the rest is `tests/logic/test_context.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from skald.messages import catalog, errors, subjects
from skald.runtime.client.api import SkaldClient
from support.context_corpus import CTX, seed


async def test_garbage_on_context_subjects(client: SkaldClient) -> None:
    for op in ("search.recall", "search.search"):
        for raw in (b"{nope", b"[1,2]", b'{"query": 5, "mode": "context"}', b'{"query":"x","mode":"context","zzz":1}'):
            resp, hdrs = await client.raw(op, raw)
            assert resp.status == "error" and resp.error["code"] == "INVALID_ARGUMENT", (op, raw)
    with pytest.raises(errors.InvalidArgument):
        await client.call("search.recall", {"query": "x", "mode": "bootstrap"})
    assert (await client.call("search.recall", {"query": "still alive"}))["entries"] == []


async def test_recall_is_a_preset_byte_identical_to_search_context(client: SkaldClient) -> None:
    await seed(client)
    explicit = {"query": "caddy upstream port", "purpose": "coding", "score_threshold": 0.35, "max_tokens": 1600,
                "dedup_turns": 0}
    a, ha = await client.raw("search.search", msgspec.json.encode({**explicit, "mode": "context"}))
    b, hb = await client.raw("search.recall", msgspec.json.encode(explicit))
    assert a.status == "ok" and msgspec.json.encode(a.result) == msgspec.json.encode(b.result)
    assert "Deprecation" not in ha and "Deprecation" not in hb
    # recall's own defaults are exactly those explicit values
    c, _ = await client.raw("search.recall", msgspec.json.encode({"query": "caddy upstream port"}))
    assert msgspec.json.encode(c.result) == msgspec.json.encode(b.result)
    # v1 aliases are folded, flagged in a header and in stats
    d, hd = await client.raw("search.recall", msgspec.json.encode(
        {"query": "caddy upstream port", "max_chars": 2000, "min_score": 0.0, "render": "compact"}))
    assert hd.get("Deprecation") == "true"
    assert d.result["stats"]["deprecated"] == ["max_chars", "min_score", "render"]
    assert d.result["stats"]["max_tokens"] == 500 and d.result["stats"]["detail"] == "abstract"


async def test_context_mode_honours_search_type_keywords(client: SkaldClient) -> None:
    """`search_type` is no longer ignored in context mode: "keywords" keeps only rows BM25 found,
    so a file sharing no word with the query stays out even under a floor that lets everything in;
    the default (dense + keyword) lets it in."""
    await client.write("viking://resources/kw/disk.md", "Alert ERR_DISK_77 fired on node seven.")
    await client.write("viking://resources/kw/other.md", "Lunch menu: lentil soup and bread.")
    base = {"query": "ERR_DISK_77 alert", "mode": "context",
            "score_threshold": -1.0}
    default = {e["uri"] for e in (await client.call("search.search", base))["entries"]}
    keywords = await client.call("search.search", {**base, "search_type": "keywords"})
    assert {"viking://resources/kw/disk.md", "viking://resources/kw/other.md"} <= default
    found = {e["uri"] for e in keywords["entries"]}
    assert "viking://resources/kw/disk.md" in found and "viking://resources/kw/other.md" not in found
    assert "search_type" not in keywords["stats"].get("ignored", [])


async def test_context_mode_stays_in_process_when_its_actors_do(deploy: Callable[..., Any]) -> None:
    """With every actor in one worker, context mode's relay to the assembler, its candidates and
    its session lookup are answered in-process: no hop crosses the bus, where the bus path sends
    each hop's request. The answer is the same. Hops are counted by subject on the bus itself, so
    background traffic (indexing acks, use counts, journal events) cannot blur the count."""
    hops = {(subjects.internal if op.internal else subjects.request)("", op.name)
            for op in (catalog.ASSEMBLE_CONTEXT, catalog.SEARCH_CANDIDATES, catalog.SESSIONS_GET)}
    got: dict[bool, tuple[dict[str, Any], list[str]]] = {}
    for local in (True, False):
        w, c = await deploy(local_calls=local)
        await seed(c)
        body = {"query": "caddy upstream port", **CTX, "session_id": "s1", "max_tokens": 800, "dedup_turns": 0}
        await c.call("search.search", body)  # the session now exists
        seen: list[str] = []

        async def note(msg: Any, seen: list[str] = seen) -> None:
            seen.append(msg.subject)

        sub = await c.nc.subscribe(f"{w.cfg.prefix}.>", cb=note)
        await c.nc.flush()
        r = await c.call("search.search", body)
        await c.nc.flush()
        await sub.unsubscribe()
        got[local] = (r, sorted(s.removeprefix(w.cfg.prefix) for s in seen if s.removeprefix(w.cfg.prefix) in hops))
    (a, hops_local), (b, hops_bus) = got[True], got[False]
    shape = [[(e["category"], e["detail"], e["text"]) for e in r["entries"]] for r in (a, b)]
    assert shape[0] == shape[1] and shape[0]
    counted = a["stats"]["uses_counted"]
    assert counted == b["stats"]["uses_counted"] > 0
    assert hops_local == [] and hops_bus == sorted(hops), (hops_local, hops_bus)
