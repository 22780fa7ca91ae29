"""The OpenViking-compatible HTTP gateway as plain HTTP sees it: status codes and the JSON
envelope, API keys, the OpenAPI document, metrics and the dashboard's queries, unknown routes and
parameters (what OpenViking's own SDK does through it is test_gateway.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from skald.runtime.bus import keys as key_store
from skald.runtime.client.api import SkaldClient
from skald.runtime.doors.gateway import ROUTES, serve


async def test_status_codes_and_envelope(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        cases = [
            (await http.post("/api/v1/search/find", content=b"{not json"), 400, "INVALID_ARGUMENT"),
            (await http.post("/api/v1/search/find", json={"query": "x", "limit": 0}), 400, "INVALID_ARGUMENT"),
            (await http.get("/api/v1/content/read", params={"uri": "viking://resources/none.md"}), 404, "NOT_FOUND"),
            (await http.get("/api/v1/content/read", params={"uri": "viking://user/bob/memories/x.md"}), 403,
             "PERMISSION_DENIED"),
            (await http.get("/api/v1/fs/ls", params={"uri": "viking://resources", "node_limit": "many"}), 400,
             "INVALID_ARGUMENT"),
            (await http.post("/api/v1/sessions/s%2F1/messages", json={"role": "user", "content": "x"}), 400,
             "INVALID_ARGUMENT"),
        ]
        for resp, status, code in cases:
            body = resp.json()
            assert (resp.status_code, body["status"], body["error"]["code"]) == (status, "error", code), body
        await http.post("/api/v1/content/write", json={"uri": "viking://resources/a.md", "content": "a"})
        ok = await http.get("/api/v1/fs/ls", params={"uri": "viking://resources", "node_limit": "5"})
        assert ok.status_code == 200 and ok.json()["status"] == "ok"
        assert (await http.get("/health")).json()["status"] == "ok"
        other = await http.get("/api/v1/fs/ls", params={"uri": "viking://user/carol/memories"},
                               headers={"X-OpenViking-User": "carol"})
        assert other.status_code in (200, 404)  # carol may look at her own space


async def test_api_keys_are_required_when_configured(skald: Any, nats_url: str, tmp_path: Path) -> None:
    """The gateway checks the workers' own keys file (no second list) and forwards on the key's connection."""
    path = tmp_path / "keys.json"
    key, _ = key_store.add(path, "user", account="default", user="default")
    revoked, rec = key_store.add(path, "user", account="default", user="other")
    key_store.revoke(path, rec.id)
    client = await SkaldClient.connect(nats_url, prefix=skald.cfg.prefix)
    runner = await serve(client, "127.0.0.1", 0, key_store.KeyStore(path), [nats_url])
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            body = {"query": "x"}
            denied = await http.post("/api/v1/search/find", json=body)
            assert denied.status_code == 401 and denied.json()["error"]["code"] == "UNAUTHENTICATED"
            for bad in ("nope", revoked):
                wrong = await http.post("/api/v1/search/find", json=body, headers={"X-API-Key": bad})
                assert wrong.status_code == 401 and "result" not in wrong.json()
            assert (await http.post("/api/v1/search/find", json=body,
                                    headers={"X-API-Key": key})).status_code == 200
            assert (await http.post("/api/v1/search/find", json=body,
                                    headers={"Authorization": f"Bearer {key}"})).status_code == 200
            # Metrics say who is busy when: a key. The API's description and liveness hold nothing.
            assert (await http.get("/metrics")).status_code == 401
            assert (await http.get("/metrics", headers={"Authorization": f"Bearer {key}"})).status_code == 200
            assert (await http.get("/openapi.json")).status_code == 200
            assert (await http.get("/health")).status_code == 200
    finally:
        await runner.cleanup()
        await client.close()


async def test_openapi_document_lists_every_route(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        doc = (await http.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.1")
    for r in ROUTES:
        assert r.method.lower() in doc["paths"][r.path]
    find = doc["paths"]["/api/v1/search/find"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert find["$ref"].endswith("/FindRequest") and "FindRequest" in doc["components"]["schemas"]
    # Typed answers: success is the envelope around the operation's own result, errors a typed error.
    ok = doc["paths"]["/api/v1/search/find"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["properties"]["result"]["$ref"].endswith("/FindResult") and "FindResult" in doc["components"]["schemas"]
    bad = doc["paths"]["/api/v1/search/find"]["post"]["responses"]["400"]["content"]["application/json"]["schema"]
    assert bad["properties"]["error"]["$ref"].endswith("/Error")
    assert "INVALID_ARGUMENT" in doc["components"]["schemas"]["Error"]["properties"]["code"]["enum"]
    # Query parameters carry their field's type; session times are ISO-8601 strings, as sent.
    ls = {p["name"]: p for p in doc["paths"]["/api/v1/fs/ls"]["get"]["parameters"]}
    assert ls["uri"]["schema"] and all(p["schema"] for p in ls.values())
    assert doc["components"]["schemas"]["SessionInfo"]["properties"]["created_at"] == {
        "type": "string", "format": "date-time"}


async def test_gateway_metrics_count_requests_by_route_and_status(gateway: str) -> None:
    """`/metrics` (Prometheus text): each request counted under its route template and status, with
    a latency histogram holding the same count."""
    async with httpx.AsyncClient(base_url=gateway) as http:
        for _ in range(3):
            await http.post("/api/v1/search/find", json={"query": "metrics please"})
        await http.post("/api/v1/search/find", content=b"{not json")
        await http.get("/api/v1/content/read", params={"uri": "viking://resources/none.md"})
        text = (await http.get("/metrics")).text
    def value(line_start: str) -> float:
        return float(next(ln for ln in text.splitlines() if ln.startswith(line_start)).rsplit(" ", 1)[1])

    find = 'skald_gateway_requests_total{method="POST",route="/api/v1/search/find",status='
    assert value(find + '"200"}') == 3 and value(find + '"400"}') == 1
    assert value('skald_gateway_requests_total{method="GET",route="/api/v1/content/read",status="404"}') == 1
    assert value('skald_gateway_request_seconds_count{method="POST",route="/api/v1/search/find"}') == 4


async def test_the_grafana_dashboard_queries_only_metrics_that_exist(gateway: str, skald: Any) -> None:
    """deploy/grafana/skald.json: every metric its panels query is exported by a worker or the
    gateway after a small workload (a dashboard of misspelt names would draw nothing)."""
    async with httpx.AsyncClient(base_url=gateway) as http:
        await http.post("/api/v1/content/write", json={"uri": "viking://resources/g.md", "content": "grafana"})
        await http.post("/api/v1/search/find", json={"query": "grafana"})
        await http.post("/api/v1/sessions/g1/messages", json={"role": "user", "content": "hello"})
        gateway_text = (await http.get("/metrics")).text
    worker_text = generate_latest(skald.metrics.registry).decode()
    exported = {s.name for text in (gateway_text, worker_text)
                for fam in text_string_to_metric_families(text) for s in fam.samples}
    dashboard = json.loads((Path(__file__).parents[2] / "deploy/grafana/skald.json").read_text())
    queried = {name for panel in dashboard["panels"] for t in panel["targets"]
               for name in re.findall(r"skald_[a-z0-9_]+", t["expr"])}
    assert len(queried) >= 10 and queried <= exported, sorted(queried - exported)


async def test_query_parameters_an_operation_does_not_take_are_ignored_and_named(gateway: str) -> None:
    """`ov ls` and `ov tree` send `simple` and `output` on every GET; they used to be refused."""
    async with httpx.AsyncClient(base_url=gateway) as http:
        await http.post("/api/v1/content/write", json={"uri": "viking://resources/q/a.md", "content": "a"})
        r = await http.get("/api/v1/fs/ls", params={"uri": "viking://resources/q", "simple": "false",
                                                     "output": "agent"})
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
        assert r.headers["X-Skald-Ignored-Params"] == "output,simple"
        bad = await http.get("/api/v1/fs/ls", params={"uri": "viking://resources/q", "node_limit": "many"})
        assert bad.status_code == 400  # a parameter it does take is still validated


async def test_unknown_routes_and_methods_answer_in_the_json_envelope(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        missing = await http.get("/api/v1/no/such/route")
        wrong = await http.delete("/api/v1/search/find")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    assert wrong.status_code == 405 and wrong.json()["status"] == "error"
    assert missing.headers["Content-Type"].startswith("application/json")
