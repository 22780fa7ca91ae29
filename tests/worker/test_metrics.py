"""A worker's /metrics after a scripted workload: requests by operation and code, latency
histograms, jobs, and the actors' own numbers, with the right counts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from skald.messages import errors


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


async def test_metrics_count_the_workload(deploy: Callable[..., Any]) -> None:
    w, c = await deploy(metrics_port=-1)
    for i in range(3):
        await c.call("fs.write", {"uri": f"viking://resources/m/{i}.md", "content": f"metric doc {i}"})
    for _ in range(2):
        await c.call("search.find", {"query": "metric doc"})
    with pytest.raises(errors.InvalidArgument):
        await c.call("search.find", {"query": "x", "limit": 0})
    async with httpx.AsyncClient() as http:
        text = (await http.get(w.metrics.url)).text
    got = samples(text)
    assert got[("skald_requests_total", (("code", "OK"), ("op", "fs.write")))] == 3
    assert got[("skald_requests_total", (("code", "OK"), ("op", "search.find")))] == 2
    assert got[("skald_requests_total", (("code", "INVALID_ARGUMENT"), ("op", "search.find")))] == 1
    assert got[("skald_request_seconds_count", (("op", "search.find"),))] == 3
    assert got[("skald_jobs_total", (("outcome", "done"), ("queue", "ingest")))] >= 3
    assert got[("skald_actor_retriever_index_rows", ())] >= 3
    assert got[("skald_actor_retriever_lag", ())] == 0
    assert ("skald_in_flight", ()) in got
    assert ("python_gc_collections_total", (("generation", "0"),)) in got
    assert got[("process_resident_memory_bytes", ())] > 0


async def test_a_failed_request_is_one_log_line_with_its_fields(deploy: Callable[..., Any],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    w, c = await deploy()
    with caplog.at_level("INFO", logger="skald.host"), pytest.raises(errors.NotFound):
        await c.call("fs.read", {"uri": "viking://resources/missing.md"})
    recs = [r for r in caplog.records if getattr(r, "op", None) == "fs.read"]
    assert len(recs) == 1 and recs[0].code == "NOT_FOUND" and recs[0].worker == w.host.worker_id
    assert recs[0].account == "default" and recs[0].duration_ms >= 0


async def test_workers_answer_nats_service_discovery(deploy: Callable[..., Any]) -> None:
    """`$SRV.INFO.skald` (what `nats micro info skald` sends): this worker answers with its prefix,
    worker id, actors and health subject in the metadata."""
    w, c = await deploy()
    inbox = c.nc.new_inbox()
    replies: list[dict[str, Any]] = []

    async def got(msg: Any) -> None:
        replies.append(json.loads(msg.data))

    sub = await c.nc.subscribe(inbox, cb=got)
    await c.nc.publish("$SRV.INFO.skald", b"", reply=inbox)
    for _ in range(50):
        if any(r.get("metadata", {}).get("worker_id") == w.host.worker_id for r in replies):
            break
        await asyncio.sleep(0.05)
    await sub.unsubscribe()
    mine = [r for r in replies if r.get("metadata", {}).get("worker_id") == w.host.worker_id]
    assert len(mine) == 1 and mine[0]["name"] == "skald"
    assert mine[0]["metadata"]["prefix"] == w.cfg.prefix and "retriever" in mine[0]["metadata"]["actors"]
