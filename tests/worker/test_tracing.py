"""OpenTelemetry tracing across actor hops: one context request is one trace whose spans cover
every hop (client, each actor's handling, the calls between them); a write's work-queue job joins
the trace that enqueued it; the HTTP gateway continues a caller's `traceparent`; a failed reply
marks its span; OTLP/HTTP export reaches a collector the test starts."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from skald.messages import errors
from skald.runtime.client import tracing
from skald.runtime.client.api import SkaldClient
from support.corpus import remember


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.setup("off", exporter=exporter)
    yield exporter
    tracing.shutdown()


def check_hops(finished: list[Any]) -> dict[str, Any]:
    """Every span in one trace under one root, each actor's span the child of the span that sent
    it the request. Returns the SERVER spans by operation."""
    assert len({s.context.trace_id for s in finished}) == 1
    assert len([s for s in finished if s.parent is None]) == 1
    ids = {s.context.span_id for s in finished}
    assert all(s.parent.span_id in ids for s in finished if s.parent is not None)
    servers = [s for s in finished if s.kind == SpanKind.SERVER]
    assert len({s.name for s in servers}) == len(servers)
    return {s.name: s for s in servers}


def ancestors(span: Any, finished: list[Any]) -> list[str]:
    by_id = {s.context.span_id: s for s in finished}
    out = []
    while span.parent is not None and span.parent.span_id in by_id:  # up to the root or a remote parent
        span = by_id[span.parent.span_id]
        out.append(f"{span.kind.name} {span.name}")
    return out


async def test_one_context_request_is_one_trace_over_every_hop(client: SkaldClient,
                                                               spans: InMemorySpanExporter) -> None:
    await remember(client, [("events", "The caddy upstream port moved to 1935 on host vega.")])
    sid = (await client.call("sessions.create", {}))["session_id"]
    await client.call("sessions.add_message", {"session_id": sid, "role": "user",
                                               "parts": [{"type": "text", "text": "which port?"}]})
    spans.clear()
    with tracing._tracer.start_as_current_span("agent turn"):  # the caller's own span parents the trace
        r = await client.call("search.search", {"query": "caddy upstream port", "mode": "context",
                                                "session_id": sid, "max_tokens": 400})
    assert r["entries"]
    finished = spans.get_finished_spans()
    servers = check_hops(finished)
    # retriever -> assembler -> session (live messages) and retriever (candidates)
    assert set(servers) == {"search.search", "assemble.context", "sessions.get", "search.candidates"}
    assert ancestors(servers["search.candidates"], finished) == [
        "SERVER assemble.context", "SERVER search.search", "INTERNAL agent turn"]
    assert ancestors(servers["sessions.get"], finished)[0] == "SERVER assemble.context"
    for s in servers.values():
        assert s.attributes["skald.code"] == "OK" and s.attributes["skald.worker"]


async def test_a_jobs_span_joins_the_trace_that_enqueued_it(client: SkaldClient,
                                                           spans: InMemorySpanExporter) -> None:
    await client.call("resources.add", {"content": "# Notes\n\nThe vega host runs caddy.", "name": "vega.md",
                                        "wait": True})
    finished: list[Any] = []
    for _ in range(100):  # the job's span ends just after the job, which may be after the reply
        finished = spans.get_finished_spans()
        if any(s.kind == SpanKind.CONSUMER for s in finished):
            break
        await asyncio.sleep(0.05)
    add = next(s for s in finished if s.kind == SpanKind.SERVER and s.name == "resources.add")
    jobs = [s for s in finished if s.kind == SpanKind.CONSUMER]
    assert jobs and all(j.context.trace_id == add.context.trace_id for j in jobs)
    assert {j.name for j in jobs} == {"ingest"} and jobs[0].attributes["skald.delivered"] == 1
    assert ancestors(jobs[0], finished)[0] == "SERVER resources.add"


async def test_a_failed_reply_marks_its_spans(client: SkaldClient, spans: InMemorySpanExporter) -> None:
    with pytest.raises(errors.InvalidArgument):
        await client.call("search.find", {"query": "x", "limit": -3})
    server = next(s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER)
    assert server.attributes["skald.code"] == "INVALID_ARGUMENT" and server.status.status_code == StatusCode.ERROR



async def test_the_gateway_continues_the_callers_trace(gateway: str, spans: InMemorySpanExporter) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with httpx.AsyncClient(base_url=gateway) as http:
        r = await http.post("/api/v1/search/find", json={"query": "caddy"},
                            headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert r.status_code == 200
    finished = spans.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in finished} == {trace_id}
    http_span = next(s for s in finished if s.name == "POST /api/v1/search/find")
    assert http_span.kind == SpanKind.SERVER and http_span.parent.span_id == 0x00F067AA0BA902B7
    assert http_span.attributes["http.response.status_code"] == 200
    find = next(s for s in finished if s.kind == SpanKind.SERVER and s.name == "search.find")
    assert ancestors(find, finished) == ["SERVER POST /api/v1/search/find"]


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server interface
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


async def test_spans_are_exported_over_otlp_http(client: SkaldClient) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tracing.setup("otlp", endpoint=f"http://127.0.0.1:{server.server_port}/v1/traces")
        await client.call("search.find", {"query": "caddy"})
        await asyncio.to_thread(tracing.shutdown)  # flushes the batch
    finally:
        server.shutdown()
    assert Collector.received and all(p == "/v1/traces" for p, _, _ in Collector.received)
    names = set()
    for _, ctype, body in Collector.received:
        assert ctype == "application/x-protobuf"
        req = ExportTraceServiceRequest.FromString(body)
        names |= {(s.kind, s.name) for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert (2, "search.find") in names  # OTLP's kind 2: server
