"""Record the write journal of a scripted workload, replay it into an empty data directory and
fresh streams, and compare answers to 50 queries and the session contexts byte for byte."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from skald.runtime.bus.streams import ensure_streams, stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.replay import journal as journal_replay

WORDS = ("caddy proxy port billing invoice deploy rollback canary tea coffee meeting roadmap kernel cache "
         "latency budget quota tenant replica shard index").split()


async def workload(c: SkaldClient, rng: random.Random) -> None:
    for i in range(12):
        words = " ".join(rng.choice(WORDS) for _ in range(30))
        await c.call("resources.add", {"content": f"# Doc {i}\n\n{words}.\n", "name": f"doc{i}.md",
                                       "target_uri": "viking://resources/handbook", "wait": True})
    for cat in ("preferences", "entities", "events"):
        for i in range(4):
            await c.call("memories.write", {"category": cat, "content": f"{cat} note {i}: "
                                            + " ".join(rng.choice(WORDS) for _ in range(12))})
    await c.call("fs.write", {"uri": "viking://resources/plan.md", "content": "# Plan\n\nShip the caddy change."})
    await c.call("fs.write", {"uri": "viking://resources/plan.md", "content": "\nThen roll back.", "mode": "append"})
    await c.call("fs.mv", {"from_uri": "viking://resources/handbook/doc0.md",
                           "to_uri": "viking://resources/handbook/first.md"})
    await c.call("fs.rm", {"uri": "viking://resources/handbook/doc1.md"})
    for s in ("s1", "s2"):
        await c.call("sessions.create", {"session_id": s})
        for t in range(6):
            await c.call("sessions.add_message", {"session_id": s, "role": "user" if t % 2 == 0 else "assistant",
                                                  "parts": [{"type": "text", "text": f"{s} turn {t} about "
                                                             + rng.choice(WORDS)}]})
        await c.call("sessions.commit", {"session_id": s, "keep_recent_count": 2, "wait": True}, timeout_s=120)
        await c.call("sessions.add_message", {"session_id": s, "role": "user",
                                              "parts": [{"type": "text", "text": f"{s} after the commit"}]})
    await c.call("sessions.create", {})  # an id the server derives


async def answers(c: SkaldClient, rng: random.Random) -> list[bytes]:
    out = []
    for i in range(50):
        q = " ".join(rng.choice(WORDS) for _ in range(3))
        op = ("search.find", "search.search")[i % 2]
        body: dict[str, Any] = {"query": q, "limit": 8}
        if op == "search.search" and i % 4 == 1:
            body["session_id"] = "s1"
        out.append(msgspec.json.encode(await c.call(op, body)))
    for s in ("s1", "s2"):
        out.append(msgspec.json.encode(await c.call("sessions.context", {"session_id": s})))
        out.append(msgspec.json.encode(await c.call("sessions.archives", {"session_id": s})))
    out.append(msgspec.json.encode(await c.call("fs.read", {"uri": "viking://resources/plan.md"})))
    out.append(msgspec.json.encode(sorted(x["session_id"] for x in (await c.call("sessions.list", {}))["sessions"])))
    return out


async def test_replayed_deployment_answers_byte_for_byte(deploy: Callable[..., Any], tmp_path: Path) -> None:
    w1, c1 = await deploy()
    await workload(c1, random.Random(5))
    journal = await journal_replay.record(c1.nc, w1.cfg.prefix)
    assert {e.op for e in journal} >= {"resources.add", "memories.write", "fs.write", "fs.mv", "fs.rm",
                                       "sessions.create", "sessions.add_message", "sessions.commit"}
    path = tmp_path / "journal.jsonl"
    journal_replay.save(journal, path)
    w2, c2 = await deploy(data_dir=tmp_path / "replayed")
    n = await journal_replay.apply(c2.nc, w2.cfg.prefix, journal_replay.load(path))
    assert n == len(journal) == 12 + 12 + 4 + 2 * (1 + 6 + 1 + 1) + 1
    first, second = await answers(c1, random.Random(9)), await answers(c2, random.Random(9))
    assert len(first) == 56
    for a, b in zip(first, second, strict=True):
        assert a == b, (a.decode()[:300], b.decode()[:300])
    # and the replayed deployment's own journal is the same history
    again = await journal_replay.record(c2.nc, w2.cfg.prefix)
    assert [(e.op, e.at) for e in again] == [(e.op, e.at) for e in journal]


async def test_replay_cli_round_trip(deploy: Callable[..., Any], nats_url: str, tmp_path: Path) -> None:
    import asyncio
    import subprocess
    import sys

    skald = str(Path(sys.executable).parent / "skald")
    w1, c1 = await deploy()
    await c1.call("memories.write", {"category": "entities", "content": "Vega runs caddy."})
    await c1.call("sessions.add_message", {"session_id": "cli", "role": "user",
                                           "parts": [{"type": "text", "text": "hello"}]})
    out = tmp_path / "j.jsonl"
    r = await asyncio.to_thread(subprocess.run, [skald, "replay", "record", "--out", str(out), "--nats-url", nats_url,
                                                 "--prefix", w1.cfg.prefix], capture_output=True, text=True)
    assert r.returncode == 0 and "recorded 2 writes" in r.stdout
    w2, c2 = await deploy(data_dir=tmp_path / "second")
    r = await asyncio.to_thread(subprocess.run, [skald, "replay", "apply", "--in", str(out), "--nats-url", nats_url,
                                                 "--prefix", w2.cfg.prefix], capture_output=True, text=True)
    assert r.returncode == 0 and "replayed 2 writes" in r.stdout
    assert (await c2.call("sessions.context", {"session_id": "cli"})) == \
        (await c1.call("sessions.context", {"session_id": "cli"}))


async def test_a_write_whose_journal_event_jetstream_cannot_take_is_parked_and_published_later(
        deploy: Callable[..., Any]) -> None:
    """The events stream gone: fs.write still answers (its event parked in the outbox, fsync'd),
    and once the stream is back the drain publishes it: the journal holds the write exactly once."""
    w, c = await deploy()
    js = c.nc.jetstream(timeout=5.0)
    await js.delete_stream(stream_name(w.cfg.prefix, "events"))
    await c.write("viking://resources/outbox/a.md", "Parked while the events stream was gone.")
    health = await c.health()
    assert health.journal["outbox"] == 1 and health.journal["parked"] == 1
    await ensure_streams(js, w.cfg.prefix)
    for _ in range(50):
        if (await c.health()).journal["outbox"] == 0:
            break
        await asyncio.sleep(0.2)
    await w.host.outbox.drain()  # a second drain (as another worker would) publishes nothing new
    entries = await journal_replay.record(c.nc, w.cfg.prefix)
    writes = [e for e in entries if e.op == "fs.write"]
    assert len(writes) == 1 and writes[0].body["uri"] == "viking://resources/outbox/a.md"


async def test_a_model_built_deployment_replays_byte_for_byte_with_no_model_reachable(
        deploy: Callable[..., Any], tmp_path: Path) -> None:
    """Abstracts, overviews and Phase 2 written by a model whose every answer is new (a counter in
    it): replayed into a deployment whose model URL refuses connections, the tree and the answers
    are the same bytes, so every answer came from the log and none was asked again."""
    from support.replaying import settle, tree_bytes
    from support.stubs import counting_model, dead_url

    stub = counting_model()
    try:
        w1, c1 = await deploy(llm_base_url=stub.url, llm_model="stub")
        for i in range(3):
            await c1.call("resources.add", {"content": f"# Note {i}\n\nThe caddy proxy listens on port 80{i}.\n",
                                            "name": f"n{i}.md", "target_uri": "viking://resources/notes",
                                            "wait": True})
        await c1.call("sessions.create", {"session_id": "m"})
        for t in range(6):
            await c1.call("sessions.add_message", {"session_id": "m", "role": ("user", "assistant")[t % 2],
                                                   "parts": [{"type": "text", "text": f"turn {t}: billing deploy"}]})
        await c1.call("sessions.commit", {"session_id": "m", "keep_recent_count": 2, "wait": True}, timeout_s=120)
        await settle(c1)  # the memories' abstracts are written in the background
        asked = len(stub.calls)
        assert asked >= 4  # abstracts, overviews and one Phase 2
        journal = await journal_replay.record(c1.nc, w1.cfg.prefix)
        assert sum(e.op == journal_replay.MODEL_OP for e in journal) == asked
    finally:
        stub.close()
    w2, c2 = await deploy(data_dir=tmp_path / "replayed", llm_base_url=dead_url(), llm_model="stub",
                          llm_timeout_s=2.0)
    await journal_replay.apply(c2.nc, w2.cfg.prefix, journal)
    await settle(c2)
    tree = tree_bytes(w1.cfg.data_dir)
    assert tree == tree_bytes(w2.cfg.data_dir)
    assert any(b"(answer " in v for v in tree.values()) and any(b"Model summary number" in v for v in tree.values())
    for q in ("caddy port", "billing deploy"):
        assert (await c1.call("search.find", {"query": q})) == (await c2.call("search.find", {"query": q}))
    assert (await c1.call("sessions.context", {"session_id": "m"})) == \
        (await c2.call("sessions.context", {"session_id": "m"}))

