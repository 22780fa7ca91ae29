"""A worker's /metrics after a scripted workload: requests by operation and code, latency
histograms, jobs, and the actors' own numbers, with the right counts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from skald.messages import errors as E


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


async def test_metrics_count_the_workload(deploy: Callable[..., Any]) -> None:
    w, c = await deploy(metrics_port=-1)
    for i in range(3):
        await c.call("fs.write", {"uri": f"viking://resources/m/{i}.md", "content": f"metric doc {i}"})
    for _ in range(2):
        await c.call("search.find", {"query": "metric doc"})
    with pytest.raises(E.InvalidArgument):
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


async def test_a_failed_request_is_one_log_line_with_its_fields(deploy: Callable[..., Any],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    w, c = await deploy()
    with caplog.at_level("INFO", logger="skald.host"), pytest.raises(E.NotFound):
        await c.call("fs.read", {"uri": "viking://resources/missing.md"})
    recs = [r for r in caplog.records if getattr(r, "op", None) == "fs.read"]
    assert len(recs) == 1 and recs[0].code == "NOT_FOUND" and recs[0].worker == w.host.worker_id
    assert recs[0].account == "default" and recs[0].duration_ms >= 0
