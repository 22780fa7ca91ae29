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
import logging
import os
import random
import signal
import subprocess
from pathlib import Path

import pytest

from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.bus.streams import stream_name
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.worker import Worker
from skald.store.local_tree import LocalTree
from support import processes
from support.cluster import Cluster, free_port, started
from support.cluster_load import Load, current, every_ack_kept_once
from support.processes import converged_replicas, reap, wait_ready
from tests.conftest import make_config

STREAMS = ("events", "work", "index", "usage", "leases")


def stream_of(prefix: str, kind: str) -> str:
    return "KV_" + stream_name(prefix, kind) if kind == "leases" else stream_name(prefix, kind)


def start_worker(cluster: Cluster, data: Path, prefix: str) -> subprocess.Popen[str]:
    return processes.worker(cluster.url, data, prefix, "session,archive,indexer,retriever", stream_replicas="3",
                            lease_ttl_s="2", work_ack_wait_s="3")


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
            await every_ack_kept_once(load, c, LocalTree(data), prefix)
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
            # As in the cluster test: the load goes on until it has exercised the restarted server
            # (150 answers and a commit), however slowly a busy machine served it.
            for _ in range(120):
                await asyncio.sleep(0.5)
                if load.answered >= 150 and load.commits >= 1:
                    break
            stop.set()
            await task
            reap(ps)
            ps.clear()
            ps.append(start())
            await asyncio.to_thread(wait_ready, ps[0], 60)
            await every_ack_kept_once(load, c, LocalTree(data), prefix)
            print(f"\none server: answered {load.answered}, retried {load.retried}, "
                  f"longest wait for an ack {load.outage_s:.1f}s")
    finally:
        reap(ps)
        await asyncio.to_thread(srv.stop)
