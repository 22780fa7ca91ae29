"""Real processes: `skald up`, `skald worker`, SIGTERM, SIGKILL, restart."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx

from skald.messages import errors
from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.client.api import SkaldClient
from support.cluster import free_port
from support.processes import finished, spawn, wait_ready


async def test_up_prints_ready_and_sigterm_exits_zero(tmp_path: Path, procs: list) -> None:
    port = free_port()
    p = spawn(["up", "--data-dir", str(tmp_path / "d"), "--nats-port", "-1", "--metrics-port", str(port)])
    procs.append(p)
    url = wait_ready(p)
    async with httpx.AsyncClient() as http:  # --metrics-port, as SKALD_METRICS_PORT
        assert "skald_requests" in (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    async with await SkaldClient.connect(url) as c:
        h = await c.call("system.health")
        assert h["status"] == "ok" and set(h["actors"]) == {"session", "archive", "indexer", "retriever", "assembler"}
        p.send_signal(signal.SIGUSR1)  # what is it waiting for: every pending task's stack, and it serves on
        assert (await c.call("system.health"))["status"] == "ok"
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    assert p.stderr is not None
    err = p.stderr.read()
    assert "connection lost" not in err and "Traceback" not in err  # a stop on purpose is not a loss
    assert "--- task index-follow" in err and "--- task consume-archive" in err and "Stack for <Task" in err
    assert "Current thread" in err  # and every thread's, a stuck one's included


async def test_a_client_command_that_does_not_finish_says_where_it_waits(tmp_path: Path, procs: list) -> None:
    server = EmbeddedNats(tmp_path / "js", port=free_port())
    url = server.start()
    try:  # no worker: the job's outcome is asked again and again until the command's deadline
        q = spawn(["job", "ingest-none", "--wait", "--nats-url", url, "--timeout", "60"])
        procs.append(q)
        try:
            await asyncio.to_thread(finished, q, 3.0)
        except AssertionError as e:
            said = str(e)
        else:
            raise AssertionError("the job command finished with nothing to answer it")
    finally:
        server.stop()
    assert "did not finish within 3.0 s" in said and "Current thread" in said and "--- task" in said, said
    assert "cli_client.py" in said  # its own frames, not just the event loop's


async def test_restart_keeps_files_and_index_without_reembedding(tmp_path: Path, procs: list) -> None:
    data = tmp_path / "d"
    p = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    procs.append(p)
    url = wait_ready(p)
    async with await SkaldClient.connect(url) as c:
        await c.call("fs.write", {"uri": "viking://resources/keep.md", "content": "durable walrus facts"})
        before = await c.call("search.find", {"query": "walrus facts"})
        rows = (await c.call("system.health"))["actors"]["retriever"]["index"]["rows"]
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    snap = data / ".skald" / "index" / "replica-0" / "meta.json"
    assert snap.exists()
    p2 = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    procs.append(p2)
    url2 = wait_ready(p2)
    async with await SkaldClient.connect(url2) as c:
        h = await c.call("system.health")
        assert h["actors"]["indexer"]["jobs_done"] == 0  # nothing re-ingested or re-embedded
        assert h["actors"]["retriever"]["index"]["rows"] == rows > 0
        after = await c.call("search.find", {"query": "walrus facts"})
        assert [m["uri"] for m in after["resources"]] == [m["uri"] for m in before["resources"]]
        assert (await c.call("fs.read", {"uri": "viking://resources/keep.md"}))["content"] == "durable walrus facts"
    p2.send_signal(signal.SIGTERM)
    assert p2.wait(20) == 0


async def test_a_corrupt_index_snapshot_is_rebuilt_from_the_stream(tmp_path: Path, procs: list) -> None:
    """A bit flipped in the snapshot's graph: the restarted worker refuses the snapshot and rebuilds
    its replica from the index stream: the same rows and answers, nothing re-embedded."""
    data = tmp_path / "d"
    p = spawn(["up", "--data-dir", str(data), "--nats-port", "-1", "--embedder", "hash"])
    procs.append(p)
    url = wait_ready(p)
    async with await SkaldClient.connect(url) as c:
        for i in range(20):
            await c.call("fs.write", {"uri": f"viking://resources/n{i}.md", "content": f"note {i} about walrus {i}"})
        before = await c.call("search.find", {"query": "walrus 7"})
        rows = (await c.call("system.health"))["actors"]["retriever"]["index"]["rows"]
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    graph = data / ".skald" / "index" / "replica-0" / "graph.links"  # split: the stream's vectors are float16
    raw = bytearray(graph.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    graph.write_bytes(bytes(raw))
    p2 = spawn(["up", "--data-dir", str(data), "--nats-port", "-1", "--embedder", "hash"])
    procs.append(p2)
    url2 = wait_ready(p2)
    async with await SkaldClient.connect(url2) as c:
        h = await c.call("system.health")
        assert h["actors"]["indexer"]["jobs_done"] == 0
        for _ in range(100):  # the rebuild follows the stream from its start
            if (await c.call("system.health"))["actors"]["retriever"]["lag"] == 0:
                break
            await asyncio.sleep(0.1)
        assert (await c.call("system.health"))["actors"]["retriever"]["index"]["rows"] == rows > 0
        after = await c.call("search.find", {"query": "walrus 7"})
        assert [m["uri"] for m in after["resources"]] == [m["uri"] for m in before["resources"]]
    p2.send_signal(signal.SIGTERM)
    assert p2.wait(20) == 0
    assert p2.stderr is not None and "graph.links does not match its checksum" in p2.stderr.read()


async def test_two_retriever_workers_share_the_load_and_survive_a_kill(tmp_path: Path, procs: list) -> None:
    """Both workers in the queue group answer; after SIGKILL of one, retried requests all succeed."""
    data = tmp_path / "d"
    up = spawn(["up", "--data-dir", str(data), "--nats-port", "-1"])
    procs.append(up)
    url = wait_ready(up)
    workers = [spawn(["worker", "--nats-url", url, "--data-dir", str(data), "--actors", "retriever"])
               for _ in range(2)]
    procs.extend(workers)
    for w in workers:
        wait_ready(w)
    async with await SkaldClient.connect(url) as c:
        await c.call("fs.write", {"uri": "viking://resources/load.md", "content": "queue groups spread requests"})
        served: set[str] = set()
        for _ in range(60):  # system.stats is served by the retriever queue group: which replica answered?
            s = await c.call("system.stats")
            served.add(s["index"]["replica"])
        assert len(served) >= 2
        workers[0].kill()
        workers[0].wait()
        ok = 0
        for _ in range(40):
            for _attempt in range(3):
                try:
                    r = await c.call("search.find", {"query": "queue groups"}, timeout_s=2.0)
                    assert r["resources"][0]["uri"] == "viking://resources/load.md"
                    ok += 1
                    break
                except (errors.DeadlineExceeded, errors.Unavailable):
                    await asyncio.sleep(0.1)
        assert ok == 40
