"""Snapshots and compaction: a deployment rebuilt from a snapshot plus the journal's tail equals
the same deployment replayed from its first event, and equals the original; the events stream
drops what a snapshot covers; a snapshot is rolled forward, never rebuilt from the start."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.replay import compaction, snapshots
from skald.runtime.replay import journal as journal_replay
from support.replaying import settle, tree_bytes
from support.stubs import counting_model, dead_url

WORDS = "caddy proxy port billing invoice deploy rollback canary tea coffee kernel cache quota replica".split()


async def part(c: SkaldClient, rng: random.Random, n: int) -> None:
    """Resources, memories, file edits and a committed session: every kind of write, with models."""
    for i in range(3):
        await c.call("resources.add", {"content": f"# Doc {n}.{i}\n\n" + " ".join(rng.choice(WORDS) for _ in range(25)),
                                       "name": f"d{n}_{i}.md", "target_uri": f"viking://resources/part{n % 2}",
                                       "wait": True})
    mem = await c.call("memories.write", {"category": "entities", "content": f"Part {n}: " + rng.choice(WORDS)})
    await c.call("fs.write", {"uri": "viking://resources/log.md", "content": f"\npart {n}", "mode": "append"})
    sid = f"s{n}"
    await c.call("sessions.create", {"session_id": sid})
    for u in range(n + 1):  # use counts (active_count) are state a snapshot carries and replay re-counts
        await c.call("sessions.used", {"session_id": sid, "uris": [mem["root_uri"], "viking://resources/log.md"],
                                       "request_id": f"{sid}-{u}"})
    for t in range(6):
        await c.call("sessions.add_message", {"session_id": sid, "role": ("user", "assistant")[t % 2],
                                              "parts": [{"type": "text", "text": f"{sid} turn {t} billing deploy "
                                                         + rng.choice(WORDS)}]})
    await c.call("sessions.commit", {"session_id": sid, "keep_recent_count": 2, "wait": True}, timeout_s=120)
    await settle(c)


async def answers(c: SkaldClient, parts: int) -> list[bytes]:
    out = []
    rng = random.Random(3)
    for _ in range(12):
        q = " ".join(rng.choice(WORDS) for _ in range(2))
        out.append(msgspec.json.encode(await c.call("search.find", {"query": q, "limit": 8})))
    for n in range(parts):
        out.append(msgspec.json.encode(await c.call("sessions.context", {"session_id": f"s{n}"})))
    out.append(msgspec.json.encode(await c.call("fs.read", {"uri": "viking://resources/log.md"})))
    return out


async def test_snapshot_plus_tail_equals_replay_from_the_first_event(deploy: Callable[..., Any],
                                                                      tmp_path: Path) -> None:
    stub = counting_model()
    snap = tmp_path / "snap"
    rng = random.Random(11)
    try:
        w1, c1 = await deploy(llm_base_url=stub.url, llm_model="stub")
        js = c1.nc.jetstream()
        events = stream_name(w1.cfg.prefix, "events")
        # The scratch deployment gets no model: every answer must come from the log.
        cfg = dataclasses.replace(w1.cfg, llm_base_url=dead_url(), llm_timeout_s=2.0)
        await part(c1, rng, 0)
        first = await compaction.compact(c1.nc, w1.cfg.prefix, snap, cfg)  # a first snapshot, nothing purged
        assert first.events_seq == (await js.stream_info(events)).state.last_seq and first.answers >= 4
        await part(c1, rng, 1)
        full = await journal_replay.record(c1.nc, w1.cfg.prefix)  # every event so far, for replay from the start
        second = await compaction.compact(c1.nc, w1.cfg.prefix, snap, cfg, purge=True)  # rolled forward
        assert second.events_seq > first.events_seq and second.answers > first.answers
        assert second.files > first.files and second.rows > first.rows
        state = (await js.stream_info(events)).state
        assert state.first_seq == second.events_seq + 1  # the covered events are gone
        await part(c1, rng, 2)
        tail = await journal_replay.record(c1.nc, w1.cfg.prefix, after=second.events_seq)
        asked = len(stub.calls)
    finally:
        stub.close()
    assert {e.op for e in tail} >= {"resources.add", "sessions.commit", journal_replay.MODEL_OP}
    assert not any(e.op == "sessions.commit" and e.body["session_id"] != "s2" for e in tail)

    # B: the snapshot's tree before the workers start, its rows and answers after, then the tail.
    data_b = tmp_path / "from_snapshot"
    assert snapshots.restore_tree(snap, data_b) == second.files
    w2, c2 = await deploy(data_dir=data_b, llm_base_url=dead_url(), llm_model="stub", llm_timeout_s=2.0)
    assert await snapshots.publish_state(c2.nc, w2.cfg.prefix, snap) == (second.rows, second.answers)
    await journal_replay.apply(c2.nc, w2.cfg.prefix, tail)
    await settle(c2)
    # C: every event from the first, in a deployment of its own.
    w3, c3 = await deploy(data_dir=tmp_path / "from_start", llm_base_url=dead_url(), llm_model="stub",
                          llm_timeout_s=2.0)
    await journal_replay.apply(c3.nc, w3.cfg.prefix, [*full, *tail])
    await settle(c3)

    original = tree_bytes(w1.cfg.data_dir)
    assert tree_bytes(data_b) == tree_bytes(w3.cfg.data_dir) == original
    assert any(b"(answer " in v for v in original.values())
    a1, a2, a3 = await answers(c1, 3), await answers(c2, 3), await answers(c3, 3)
    assert any(b'"active_count":3' in a for a in a1)  # the log file, used once per use call
    for x, y, z in zip(a1, a2, a3, strict=True):
        assert x == y == z, (x.decode()[:200], y.decode()[:200], z.decode()[:200])
    assert len(stub.calls) == asked  # (closed anyway: nothing could have asked it)


async def test_a_replayed_write_keeps_the_time_of_the_original(deploy: Callable[..., Any], tmp_path: Path) -> None:
    """Replayed, a write lands now, at the original's clock (`Skald-Clock`): its rows carry the
    original's time, so `since` / `until` find in the replayed deployment what they found in the
    original."""
    uri = "viking://resources/notes/tides.md"
    w1, c1 = await deploy()
    await c1.call("fs.write", {"uri": uri, "content": "# Tides\n\nSpring tides follow the new moon.\n"})
    past = datetime(2022, 1, 10, tzinfo=UTC).timestamp()  # as if the original ran then
    entries = [msgspec.structs.replace(e, at=past + i) for i, e in
               enumerate(await journal_replay.record(c1.nc, w1.cfg.prefix))]
    assert [e.op for e in entries] == ["fs.write"]
    w2, c2 = await deploy(data_dir=tmp_path / "replayed")
    await journal_replay.apply(c2.nc, w2.cfg.prefix, entries)
    await settle(c2)

    async def found(**when: str) -> bool:
        r = await c2.call("search.find", {"query": "spring tides new moon", **when})
        return uri in [h["uri"] for h in r["resources"]]

    assert await found(until="2022-01-31") and not await found(since="2022-01-31")


async def test_compaction_refuses_a_gap_and_restore_refuses_a_tree(deploy: Callable[..., Any],
                                                                   tmp_path: Path) -> None:
    """Events dropped before a snapshot covered them (retention too short) cannot be rolled over;
    a snapshot is never unpacked over an existing tree."""
    w, c = await deploy()
    await c.write("viking://resources/a.md", "First.")
    await c.write("viking://resources/b.md", "Second.")
    await settle(c)
    js = c.nc.jetstream()
    events = stream_name(w.cfg.prefix, "events")
    await js.purge_stream(events, seq=(await js.stream_info(events)).state.last_seq)  # keep only the last
    with pytest.raises(compaction.CompactError, match="dropped"):
        await compaction.compact(c.nc, w.cfg.prefix, tmp_path / "snap", w.cfg)
    assert not (tmp_path / "snap").exists()
    with pytest.raises(FileExistsError):
        snapshots.restore_tree(tmp_path / "snap", w.cfg.data_dir)


async def test_the_events_stream_keeps_the_configured_age(deploy: Callable[..., Any]) -> None:
    w, c = await deploy(events_max_age_s=86_400.0)
    info = await c.nc.jetstream().stream_info(stream_name(w.cfg.prefix, "events"))
    assert info.config.max_age == 86_400.0
    w2, c2 = await deploy()  # the default keeps every event
    info = await c2.nc.jetstream().stream_info(stream_name(w2.cfg.prefix, "events"))
    assert not info.config.max_age


async def test_moving_a_deployment_with_the_cli(deploy: Callable[..., Any], nats_url: str, tmp_path: Path) -> None:
    """compact --purge, record --after-snapshot, restore, apply --snapshot: the commands of a move."""
    import asyncio
    import os
    import subprocess
    import sys

    skald = str(Path(sys.executable).parent / "skald")
    env = {**os.environ, "SKALD_EMBEDDER": "hash"}

    async def run(*args: str) -> str:
        r = await asyncio.to_thread(subprocess.run, [skald, "replay", *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout

    w1, c1 = await deploy()
    conn = ["--nats-url", nats_url, "--prefix", w1.cfg.prefix]
    await c1.call("memories.write", {"category": "entities", "content": "Vega runs caddy on port 8443."})
    await c1.write("viking://resources/runbook.md", "# Runbook\n\nRestart caddy with systemctl.")
    await settle(c1)
    snap = tmp_path / "snap"
    assert "(covered events purged)" in await run("compact", "--snapshot", str(snap), "--purge", *conn)
    await c1.write("viking://resources/later.md", "Written after the snapshot.")
    out = await run("record", "--after-snapshot", str(snap), "--out", str(tmp_path / "tail.jsonl"), *conn)
    assert "recorded 1 writes" in out
    assert "restored" in await run("restore", "--snapshot", str(snap), "--data-dir", str(tmp_path / "new"))
    w2, c2 = await deploy(data_dir=tmp_path / "new")
    out = await run("apply", "--snapshot", str(snap), "--in", str(tmp_path / "tail.jsonl"), "--nats-url", nats_url,
                    "--prefix", w2.cfg.prefix)
    assert "replayed 1 writes" in out
    await settle(c2)
    assert tree_bytes(w1.cfg.data_dir) == tree_bytes(w2.cfg.data_dir)
    for q in ("caddy port", "after the snapshot"):
        assert (await c1.call("search.find", {"query": q})) == (await c2.call("search.find", {"query": q}))


async def snapshotted_write(c: SkaldClient) -> dict[str, Any]:
    """A resource written, then the retriever's health once a snapshot holds it (or after 10 s)."""
    await c.call("resources.add", {"content": "# Snap\n\ncaddy listens on 8443", "name": "snap.md",
                                   "target_uri": "viking://resources/snap", "wait": True})
    for _ in range(200):
        r: dict[str, Any] = (await c.health()).actors["retriever"]
        if r["applied_seq"] > 0 and r["snapshot_seq"] >= r["applied_seq"]:
            break
        await asyncio.sleep(0.05)
    return r


async def test_health_reports_the_replica_snapshot_that_holds_the_last_write(deploy: Callable[..., Any]) -> None:
    """An operator (and the 100k bench) can tell a replica whose snapshot covers everything it
    applied from one with a snapshot still to come, and how long the last one took."""
    w, c = await deploy(snapshot_interval_s=0.2)
    r = await snapshotted_write(c)
    assert r["applied_seq"] > 0 and r["snapshot_seq"] == r["applied_seq"] and r["snapshot_ms"] > 0
    assert Path(r["replica"], "meta.json").is_file()


async def test_the_replica_takes_up_the_keyword_index_of_its_snapshot(deploy: Callable[..., Any]) -> None:
    """With `snapshot_maps_keywords`, after its snapshot the replica's keyword postings are the
    snapshot's, mapped from its file, and what is written after it is found as before."""
    w, c = await deploy(snapshot_interval_s=0.2, snapshot_maps_keywords=True)
    index = w.host.actors["retriever"].index
    built = index.keywords  # taken before the write: its snapshot may follow within 0.2 s
    r = await snapshotted_write(c)
    assert r["snapshot_seq"] >= r["applied_seq"] > 0
    assert index.keywords is not built and not index.keywords._post._labels.flags.owndata
    await c.call("resources.add", {"content": "# Later\n\nthe zanzibar relay restarts nightly", "name": "later.md",
                                   "target_uri": "viking://resources/later", "wait": True})
    for q, uri in (("zanzibar relay", "viking://resources/later"), ("caddy 8443", "viking://resources/snap")):
        hits = (await c.call("search.find", {"query": q, "limit": 3}))["resources"]
        assert hits and hits[0]["uri"].startswith(uri), (q, hits)
    # Its writes ran on a thread of their own (so the index it dropped was not in the searches' arena).
    writer = w.host.actors["retriever"].replica._writer
    assert writer is not None and any(t.name.startswith("index-writer") for t in writer._threads)


async def test_by_default_the_replica_keeps_the_keyword_index_it_built(deploy: Callable[..., Any]) -> None:
    w, c = await deploy(snapshot_interval_s=0.2)
    index = w.host.actors["retriever"].index
    built = index.keywords
    r = await snapshotted_write(c)
    assert r["snapshot_seq"] >= r["applied_seq"] > 0 and index.keywords is built
    assert w.host.actors["retriever"].replica._writer is None  # writes where they always ran



async def test_a_replica_on_the_8bit_graph_snapshots_it_and_reads_it_back(deploy: Callable[..., Any],
                                                                         tmp_path: Path) -> None:
    """`vector_graph = "sq8"` end to end: the replica's snapshot holds faiss's graph and reads back
    on the 8-bit graph only (a replica on hnswlib rebuilds from the index stream instead)."""
    from skald.store.index import VectorIndex

    w, c = await deploy(snapshot_interval_s=0.2, vector_graph="sq8")
    replica = w.host.actors["retriever"].replica
    r = await snapshotted_write(c)
    assert r["snapshot_seq"] >= r["applied_seq"] > 0 and replica.index.graph_kind == "sq8"
    hits = (await c.call("search.find", {"query": "caddy 8443", "limit": 3}))["resources"]
    assert hits and hits[0]["uri"].startswith("viking://resources/snap")
    await c.close()
    await w.stop()
    meta = msgspec.json.decode(Path(r["replica"], "meta.json").read_bytes())
    assert meta["graph"] == "sq8" and Path(r["replica"], "graph.faiss").is_file()
    back = VectorIndex.load(Path(r["replica"]), replica.dim, replica.model, graph="sq8")
    assert back is not None and len(back) == len(replica.index) > 0
    assert back.content_hash() == replica.index.content_hash()
    assert VectorIndex.load(Path(r["replica"]), replica.dim, replica.model, graph="hnsw") is None


async def test_a_snapshot_restores_into_a_deployment_with_no_shared_disk(deploy: Callable[..., Any], nats_url: str,
                                                                          tmp_path: Path) -> None:
    """`replay restore --store jetstream`: the snapshot's tree into the bus's buckets, every file as
    captured (archives and markers included); a second restore over it is refused; the deployment
    on those buckets, given the snapshot's rows, answers as the original does."""
    import subprocess
    import sys

    from skald.runtime.bus.jetstream_tree import JetStreamTree
    from skald.runtime.host.migrate import migrate
    from skald.store.local_tree import LocalTree

    rng = random.Random(5)
    w1, c1 = await deploy()
    await part(c1, rng, 0)
    snap = tmp_path / "snap"
    meta = await compaction.compact(c1.nc, w1.cfg.prefix, snap, w1.cfg)
    prefix = f"{w1.cfg.prefix}js"
    cmd = [str(Path(sys.executable).parent / "skald"), "replay", "restore", "--snapshot", str(snap), "--store",
           "jetstream", "--data-dir", str(tmp_path / "scratch"), "--nats-url", nats_url, "--prefix", prefix]
    r = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True)
    assert r.returncode == 0 and f"restored {meta.files} files" in r.stdout, r.stderr
    again = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True)
    assert again.returncode != 0 and "already holds a tree" in again.stderr

    tree = JetStreamTree([nats_url], f"{prefix}_tree")
    try:
        assert tree.stat(snapshots.RESTORING) is None
        await asyncio.to_thread(migrate, tree, LocalTree(tmp_path / "read_back"))
    finally:
        tree.close()
    assert tree_bytes(tmp_path / "read_back") == tree_bytes(w1.cfg.data_dir)
    assert any("/history/archive_" in k for k in tree_bytes(w1.cfg.data_dir))  # a session's archive went too

    w2, c2 = await deploy(prefix=prefix, store="jetstream", data_dir=tmp_path / "js_worker")
    await snapshots.publish_state(c2.nc, prefix, snap)
    await settle(c2)
    # Queries that match: a restored row carries the times of the scratch deployment's replay, not the
    # original's, which can order the near-zero tail of a query matching nothing differently.
    for q in ("billing deploy", "coffee invoice cache"):
        assert (await c1.call("search.find", {"query": q})) == (await c2.call("search.find", {"query": q}))
    assert (await c1.call("fs.read", {"uri": "viking://resources/log.md"})) == \
        (await c2.call("fs.read", {"uri": "viking://resources/log.md"}))
