"""No shared disk (`--store jetstream`): three hosts, each a nats-server of one cluster and a worker
with its own private data directory. Under a load of add_message, commits and writes (each an
ingest), one host is SIGKILLed (its nats-server and its worker) and its disk wiped, the nats-server's
store included. The two others answer every request (UNAVAILABLE while leaders are elected, never
INTERNAL); nothing acknowledged is lost or duplicated; every Phase 2 finishes on a surviving worker;
and the host, restarted on an empty disk, rejoins and serves."""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from skald.runtime.bus.jetstream_tree import JetStreamTree
from skald.runtime.client.api import SkaldClient
from skald.store import sessions as session_store
from skald.store.uri import Identity, Namespace
from support import processes
from support.cluster import Cluster
from support.cluster_load import Load, every_ack_kept_once
from support.processes import reap, wait_ready, worker_ids

ACTORS = "session,archive,indexer,retriever"


def host_worker(cluster: Cluster, i: int, data: Path, prefix: str) -> subprocess.Popen[str]:
    """Host i's worker: its own node first, the others to fail over to."""
    urls = ",".join([cluster.urls[i], *(u for j, u in enumerate(cluster.urls) if j != i)])
    return processes.worker(urls, data, prefix, ACTORS, stream_replicas="3", lease_ttl_s="2", work_ack_wait_s="3",
                            store="jetstream")


def archive_states(tree: JetStreamTree, sids: list[str]) -> dict[str, list[str]]:
    """Each session's archives' states; a failed one with its marker's stage and error, so a test
    that waits for them all to complete says why one did not."""
    ns = Namespace(Path("/nonexistent"), tree)
    out = {}
    for sid in sids:
        sdir = session_store.session_dir(ns, Identity(), sid)
        states = []
        for i in session_store.archive_indexes(sdir):
            state = session_store.marker_state(sdir, i)
            if state == "failed" and (m := session_store.read_failed(sdir, session_store.archive_name(i))):
                state = f"failed at {m.stage}: {m.error}"
            states.append(state)
        out[sid] = states
    return out


async def test_a_host_killed_and_its_disk_wiped_loses_nothing_and_rejoins_empty(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "nats")
    await cluster.start()
    await cluster.ready()
    prefix = "nsd"
    disks = [tmp_path / f"host{i}" for i in range(3)]
    ps: list[subprocess.Popen[str]] = [host_worker(cluster, i, disks[i], prefix) for i in range(3)]
    tree: JetStreamTree | None = None
    try:
        for p in ps:
            await asyncio.to_thread(wait_ready, p, 60)
        async with await SkaldClient.connect(cluster.urls, prefix=prefix) as c:
            load = Load(c)
            await load.call("sessions.add_message", {"session_id": "c0", "role": "user", "id": "m00000",
                                                     "parts": [{"type": "text", "text": "hello"}]})
            load.caller_ids["c0"].append("m00000")
            stop = asyncio.Event()
            task = asyncio.create_task(load.run(stop, random.Random(7)))
            await asyncio.sleep(3.0)
            # Host 0 dies: its nats-server and its worker, then its disk (the server's store with it).
            cluster.kill(0)
            reap([ps[0]])
            shutil.rmtree(disks[0])
            shutil.rmtree(cluster.base / "n0", ignore_errors=True)
            answered, t0 = load.answered, time.monotonic()
            while load.answered < answered + 30 and time.monotonic() - t0 < 60:
                await asyncio.sleep(0.25)  # the two others carry the load through the elections
            assert load.answered >= answered + 30, "the surviving hosts stopped answering"
            resumed = time.monotonic() - t0
            await cluster.start(0)  # an empty disk: the server catches up from its peers
            ps[0] = host_worker(cluster, 0, disks[0], prefix)
            await asyncio.to_thread(wait_ready, ps[0], 90)
            for _ in range(120):
                await asyncio.sleep(0.5)
                if load.answered >= 150 and load.commits >= 2:
                    break
            stop.set()
            await task
            assert load.internal == 0
            tree = await asyncio.to_thread(JetStreamTree, cluster.urls, f"{prefix}_tree")
            try:
                await every_ack_kept_once(load, c, tree, prefix)
            except AssertionError:
                for sid in sorted([*load.caller_ids, *load.server_texts]):
                    key = f"accounts/default/user/default/sessions/{sid}"
                    print(sid, [(e.name, e.is_dir) for e in tree.list(key)])
                    try:
                        print("  history", [e.name for e in tree.list(key + "/history")])
                    except Exception as e:  # noqa: BLE001
                        print("  history:", repr(e))
                js = c.nc.jetstream()
                for name in ("KV_nsd_tree_default", "KV_nsd_tree__"):
                    info = await js.stream_info(name)
                    print(name, info.config.num_replicas, info.cluster, info.state.messages)
                raise
            sids = sorted([*load.caller_ids, *load.server_texts])
            states: dict[str, list[str]] = {}
            for _ in range(120):  # every Phase 2 finishes, on whichever worker holds its job
                states = await asyncio.to_thread(archive_states, tree, sids)
                if all(s == "completed" for v in states.values() for s in v):
                    break
                await asyncio.sleep(0.5)
            assert states and all(s == "completed" for v in states.values() for s in v), states
            assert sum(len(v) for v in states.values()) >= 2
            # The restarted host serves, from an empty disk that holds no file of the tree.
            ids = await worker_ids(c, "retriever", 3)
            assert len(ids) == 3
            assert not [p for p in disks[0].rglob("*") if p.suffix in (".md", ".jsonl")]
            print(f"\nno shared disk: answered {load.answered}, retried {load.retried}, commits {load.commits}, "
                  f"30 answers {resumed:.1f}s after the kill, longest wait for an ack {load.outage_s:.1f}s")
    finally:
        if tree is not None:
            await asyncio.to_thread(tree.close)
        reap(ps)
        await asyncio.to_thread(cluster.stop)


async def test_an_accounts_buckets_are_placed_by_its_tags(tmp_path: Path) -> None:
    """SKALD_STORE_PLACEMENT: an account's buckets go to the servers carrying its tags, at the
    deployment's replicas; a tag no server carries is refused by JetStream, never placed elsewhere."""
    cluster = Cluster(tmp_path / "nats", tags=["pool:a"])
    await cluster.start()
    await cluster.ready()
    t = await asyncio.to_thread(JetStreamTree, cluster.urls, "placed_tree", replicas=3,
                                placement={"acme": ["pool:a"], "*": ["pool:a"], "other": ["pool:b"]})
    try:
        await asyncio.to_thread(t.write, "accounts/acme/resources/a.md", b"a")
        b = t._run(t._bucket("acme"))
        info = t._run(b.js.stream_info(b.stream))
        assert info.config.placement.tags == ["pool:a"] and info.config.num_replicas == 3
        assert len(info.cluster.replicas or []) == 2  # the leader and two others: three servers
        with pytest.raises(Exception, match="(?i)no suitable peers|insufficient|placement"):
            await asyncio.to_thread(t.write, "accounts/other/resources/b.md", b"b")  # pool:b: nowhere
    finally:
        await asyncio.to_thread(t.close)
        await asyncio.to_thread(cluster.stop)
