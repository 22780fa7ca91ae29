"""Skald on a three-node JetStream cluster (loopback, the shipped nats-server), as an operator runs
it: workers with `SKALD_STREAM_REPLICAS=3` sharing one data directory, the leader of each stream
(events, work, index, the lease bucket) SIGKILLed in turn under a mixed load and brought back.

Shown: every acknowledged message and write present exactly once after the session owners
restart (caller ids and server ids alike), the journal holding each message once, zero INTERNAL
replies, every retried request acknowledged in the end, index replicas equal after catch-up,
streams still R3; a worker configured for R1 leaves them at R3 and says so; a worker started
before the cluster has a JetStream leader waits for it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from skald.messages import errors
from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.worker import Worker
from support import processes
from support.cluster import Cluster, free_port, started
from support.processes import converged_replicas, journal_counts, reap, wait_ready
from tests.conftest import make_config

STREAMS = ("events", "work", "index", "usage", "leases")


def stream_of(prefix: str, kind: str) -> str:
    return "KV_" + stream_name(prefix, kind) if kind == "leases" else stream_name(prefix, kind)


def start_worker(cluster: Cluster, data: Path, prefix: str) -> subprocess.Popen[str]:
    return processes.worker(cluster.url, data, prefix, "session,archive,indexer,retriever", stream_replicas="3",
                            lease_ttl_s="2", work_ack_wait_s="3")


class Load:
    """A mixed load; each request is retried (same ids, same idempotency key) until acknowledged."""

    def __init__(self, c: SkaldClient) -> None:
        self.c = c
        self.answered = self.retried = self.internal = 0
        self.outage_s = 0.0  # the longest time one request needed to be acknowledged
        self.caller_ids: dict[str, list[str]] = {"c0": [], "c1": []}
        self.server_texts: dict[str, list[str]] = {"v0": [], "v1": []}
        self.files: dict[str, str] = {}
        self.commits = 0

    async def call(self, op: str, body: dict[str, Any]) -> Any:
        t0 = time.monotonic()
        for _ in range(200):
            try:
                r = await self.c.call(op, body, timeout_s=3.0)
            except errors.Internal:
                self.internal += 1
            except (errors.Unavailable, errors.DeadlineExceeded):
                self.retried += 1
            else:
                self.answered += 1
                self.outage_s = max(self.outage_s, time.monotonic() - t0)
                return r
            await asyncio.sleep(0.2)
        raise AssertionError(f"{op} never acknowledged")

    async def run(self, stop: asyncio.Event, rng: random.Random) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            roll = rng.random()
            if roll < 0.3:
                sid = rng.choice(sorted(self.caller_ids))
                await self.call("sessions.add_message", {"session_id": sid, "role": "user", "id": f"m{n:05d}",
                                                         "parts": [{"type": "text", "text": f"caller {n}"}]})
                self.caller_ids[sid].append(f"m{n:05d}")
            elif roll < 0.55:
                sid = rng.choice(sorted(self.server_texts))
                await self.call("sessions.add_message", {"session_id": sid, "role": "user", "request_id": f"r{n}",
                                                         "parts": [{"type": "text", "text": f"server {n}"}]})
                self.server_texts[sid].append(f"server {n}")
            elif roll < 0.7:
                uri = f"viking://resources/cl/f{n % 12}.md"
                await self.call("fs.write", {"uri": uri, "content": f"# Doc\n\nrevision {n}\n", "mode": "replace"})
                self.files[uri] = f"# Doc\n\nrevision {n}\n"
            elif roll < 0.95:
                await self.call("search.find", {"query": f"revision {rng.randint(0, n)}"})
            else:
                used = {**self.caller_ids, **self.server_texts}
                sid = rng.choice(sorted(k for k, v in used.items() if v))
                await self.call("sessions.commit", {"session_id": sid, "keep_recent_count": 2})
                self.commits += 1


async def current(js: Any, name: str, timeout_s: float = 30.0) -> None:
    """Until every replica of the stream is current again (a restarted node caught up)."""
    for _ in range(int(timeout_s / 0.25)):
        try:
            info = await js.stream_info(name)
            reps = info.cluster.replicas or []
            if info.cluster.leader and len(reps) == 2 and all(r.current for r in reps):
                return
        except Exception:  # noqa: BLE001 - electing
            pass
        await asyncio.sleep(0.25)
    raise AssertionError(f"{name} replicas never caught up")


def stored_messages(data: Path, sid: str) -> list[dict[str, Any]]:
    """Every message of a session as the disk holds it: the archives, then root (each with
    `_where`). Root is read from its file, not from `sessions.context`, whose messages also carry
    the raw of archives still pending Phase 2 (they would count twice)."""
    out: list[dict[str, Any]] = []
    sdir = data / "accounts/default/user/default/sessions" / sid
    for f in [*sorted((sdir / "history").glob("archive_*/messages.jsonl")), sdir / "messages.jsonl"]:
        where = f.parent.name if f.parent.name.startswith("archive_") else "live"
        out += [{**m, "_where": where} for x in f.read_text().splitlines()
                if x.strip() and (m := json.loads(x)).get("message_kind") != "checkpoint"]
    return out


async def every_ack_kept_once(load: Load, c: SkaldClient, data: Path, prefix: str) -> None:
    """After the load and a restart of the session owners: every acknowledged message stored
    exactly once (caller ids and server ids), the counters agree, every acknowledged write reads
    back, and the journal carries each stored message once."""
    assert load.internal == 0
    assert load.answered > 100 and load.commits >= 1, (load.answered, load.commits)
    every_id: set[tuple[str, str]] = set()
    for sid in [*load.caller_ids, *load.server_texts]:
        await load.call("sessions.context", {"session_id": sid})  # loaded (and repaired) by its owner
        msgs = stored_messages(data, sid)
        ids = [m["id"] for m in msgs]
        twice = {i for i in ids if ids.count(i) > 1}
        where = [(m["id"], m["_where"], m["created_at"]) for m in msgs if m["id"] in twice]
        assert not twice, f"{sid}: stored twice: {where}"
        info = await load.call("sessions.get", {"session_id": sid})
        assert info["total_message_count"] == len(ids), (sid, info, len(ids))
        if sid in load.caller_ids:
            assert sorted(ids) == sorted(load.caller_ids[sid])
        else:
            texts = [m["parts"][0]["text"] for m in msgs]
            assert sorted(texts) == sorted(load.server_texts[sid]), sid
        every_id |= {(sid, i) for i in ids}
    for uri, content in load.files.items():
        assert (await load.call("fs.read", {"uri": uri}))["content"] == content
    # the journal has each stored message exactly once (recovered ones included)
    counts: dict[tuple[str, str], int] = {}
    for _ in range(60):
        counts = await journal_counts(c.nc, prefix)
        if all(counts.get(k) for k in every_id):
            break
        await asyncio.sleep(0.25)
    assert {k: counts.get(k) for k in every_id} == dict.fromkeys(every_id, 1)


async def test_killing_each_stream_leader_under_load_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "nats")
    await cluster.start()
    data, prefix = tmp_path / "data", "clu"
    ps: list[subprocess.Popen[str]] = []
    try:
        await cluster.ready()
        ps += [start_worker(cluster, data, prefix) for _ in range(2)]
        for p in ps:
            await asyncio.to_thread(wait_ready, p, 60)
        async with await SkaldClient.connect(cluster.urls, prefix=prefix) as c:
            js = c.nc.jetstream(timeout=3.0)
            load = Load(c)
            await load.call("sessions.add_message", {"session_id": "c0", "role": "user", "id": "m00000",
                                                     "parts": [{"type": "text", "text": "hello"}]})
            load.caller_ids["c0"].append("m00000")  # the lease bucket exists from here on
            stop = asyncio.Event()
            task = asyncio.create_task(load.run(stop, random.Random(5)))
            killed = []
            for kind in STREAMS:
                await asyncio.sleep(1.5)
                name = stream_of(prefix, kind)
                leader = cluster.index_of((await js.stream_info(name)).cluster.leader)
                cluster.kill(leader)
                killed.append((kind, leader))
                await asyncio.sleep(4.0)  # the load runs through the election
                await cluster.start(leader)
                for s in STREAMS:
                    await current(js, stream_of(prefix, s))
            # The load goes on until it has exercised the cluster (at least 150 answers and a
            # commit), however slow the machine was during the elections; a cluster that no
            # longer answers still fails the liveness check below.
            for _ in range(120):
                await asyncio.sleep(0.5)
                if load.answered >= 150 and load.commits >= 1:
                    break
            stop.set()
            await task
            # the session owners restart (SIGKILL, as a crash would): everything is reloaded from disk
            reap(ps)
            ps.clear()
            ps += [start_worker(cluster, data, prefix) for _ in range(2)]
            for p in ps:
                await asyncio.to_thread(wait_ready, p, 60)
            await every_ack_kept_once(load, c, data, prefix)
            # replicas equal after catch-up; streams still R3
            hashes = await converged_replicas(c, 2)
            assert len({h["content_hash"] for h in hashes.values()}) == 1, hashes
            for kind in STREAMS:
                assert (await js.stream_info(stream_of(prefix, kind))).config.num_replicas == 3, kind
            print(f"\ncluster: killed {killed}; answered {load.answered}, retried {load.retried}, "
                  f"internal {load.internal}, commits {load.commits}, longest wait for an ack {load.outage_s:.1f}s")
    finally:
        reap(ps)
        await asyncio.to_thread(cluster.stop)


async def test_worker_waits_for_a_jetstream_leader_and_never_lowers_replicas(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(tmp_path / "nats")
    await cluster.start(0)  # one node of three: no quorum, no JetStream leader yet
    workers: list[Worker] = []
    try:
        strong = Worker(make_config(cluster.urls[0], tmp_path / "data", prefix="rep",
                                    stream_replicas=3, actors=("session", "indexer", "retriever")), embedded=False)
        starting = asyncio.create_task(strong.start())
        await asyncio.sleep(2.0)
        assert not starting.done()  # waiting, not exiting
        await cluster.start(1, 2)
        await asyncio.wait_for(starting, 60)
        workers.append(strong)
        async with await SkaldClient.connect(cluster.urls, prefix="rep") as c:
            await c.add_message("s", "user", "hi")  # creates the lease bucket at R3
            js = c.nc.jetstream(timeout=3.0)
            caplog.set_level(logging.WARNING, logger="skald.bus")
            weak = Worker(make_config(cluster.url, tmp_path / "data", prefix="rep", stream_replicas=1,
                                      actors=("session", "retriever")), embedded=False)
            await weak.start()
            workers.append(weak)
            for kind in STREAMS:
                assert (await js.stream_info(stream_of("rep", kind))).config.num_replicas == 3, kind
            said = [r.getMessage() for r in caplog.records if "keeping 3" in r.getMessage()]
            assert len(said) == len(STREAMS), said
    finally:
        for w in workers:
            await w.stop()
        await asyncio.to_thread(cluster.stop)


async def test_killing_the_only_nats_server_under_load_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """One nats-server (as `skald up` embeds it) SIGKILLed under the same mixed load and started
    again on its store: the worker and the client reconnect by themselves, and every acknowledged
    message and write is there exactly once."""
    port = free_port()

    srv = await started(lambda: EmbeddedNats(tmp_path / "nats", port=port))
    data, prefix = tmp_path / "data", "one"
    ps: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        return processes.worker(srv.url, data, prefix, "session,archive,indexer,retriever", lease_ttl_s="2",
                                work_ack_wait_s="3")
    try:
        ps.append(start())
        await asyncio.to_thread(wait_ready, ps[0], 60)
        async with await SkaldClient.connect(srv.url, prefix=prefix) as c:
            load = Load(c)
            stop = asyncio.Event()
            task = asyncio.create_task(load.run(stop, random.Random(11)))
            await asyncio.sleep(2.0)
            assert srv.proc is not None
            os.kill(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait()
            await asyncio.sleep(3.0)  # the load keeps asking into the outage
            srv = await started(lambda: EmbeddedNats(tmp_path / "nats", port=port))
            await asyncio.sleep(3.0)
            stop.set()
            await task
            reap(ps)
            ps.clear()
            ps.append(start())
            await asyncio.to_thread(wait_ready, ps[0], 60)
            await every_ack_kept_once(load, c, data, prefix)
            print(f"\none server: answered {load.answered}, retried {load.retried}, "
                  f"longest wait for an ack {load.outage_s:.1f}s")
    finally:
        reap(ps)
        await asyncio.to_thread(srv.stop)
