"""A worker SIGKILLed in the middle of an ingest job: the job is redelivered and finishes."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from skald.runtime.client.api import SkaldClient
from support import processes
from support.processes import reap, wait_ready


def worker(url: str, data: Path, prefix: str) -> subprocess.Popen[str]:
    return processes.worker(url, data, prefix, "indexer,retriever", work_ack_wait_s="2")


async def test_ingest_killed_mid_job_resumes_on_another_worker(nats_url: str, tmp_path: Path) -> None:
    src = tmp_path / "bulk"
    for i in range(3000):
        d = src / f"part{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"n{i:04d}.md").write_text(f"# Note {i}\n\nThe number {i} is noted here.\n")
    prefix = "crashingest"
    data = tmp_path / "data"
    first = worker(nats_url, data, prefix)
    procs = [first]
    try:
        wait_ready(first)
        async with await SkaldClient.connect(nats_url) as c:
            c.prefix = prefix
            progressed = asyncio.Event()
            finished: list[bytes] = []

            async def on_progress(msg: object) -> None:
                progressed.set()

            async def on_done(msg: object) -> None:
                finished.append(msg.data)  # type: ignore[attr-defined]

            token = (await c.whoami()).account_token
            await c.nc.subscribe(f"{prefix}.note.acct.{token}.ingest.progress.*", cb=on_progress)
            await c.nc.subscribe(f"{prefix}.evt.acct.{token}.ingest.done.*", cb=on_done)
            r = await c.call("resources.add", {"path": str(src)})
            assert r["status"] == "queued"
            await asyncio.wait_for(progressed.wait(), 30)
            first.kill()
            first.wait()
            assert not finished, "the job finished before the kill; the test proved nothing"
            second = worker(nats_url, data, prefix)
            procs.append(second)
            wait_ready(second)
            for _ in range(600):
                if finished:
                    break
                await asyncio.sleep(0.1)
            assert finished
            done = json.loads(finished[0])
            assert done["status"] == "done" and done["files"] == 3000
            c.index_seq = done["index_seq"]  # read-your-writes: wait for the replica to apply it
            found = await c.call("search.find", {"target_uri": "viking://resources/bulk", "level": 2,
                                                 "limit": 5000}, timeout_s=30)
            uris = {m["uri"] for m in found["resources"]}
            assert len(uris) == 3000
            assert (await c.call("fs.overview", {"uri": "viking://resources/bulk/part3"}))["content"]
    finally:
        reap(procs)
