"""OpenAI-compatible clients against a small real HTTP server the test starts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from skald.runtime.models.embedders import OpenAIEmbedder
from skald.runtime.models.httpjson import HTTPStatusError, JsonClient
from skald.runtime.models.llm import LLMSummarizer, OpenAIChat


class ModelServer(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if type(self).mode == "fail":
            self.send_response(500)
            self.end_headers()
            return
        if type(self).mode == "hang":
            time.sleep(2)
        if self.path.endswith("/embeddings"):
            data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0, 0.0]} for i, t in enumerate(body["input"])]
            out = {"data": data, "usage": {"total_tokens": 7}}
        else:
            text = "garbage" if type(self).mode == "empty" else "A short model summary."
            out = {"choices": [{"message": {"content": "" if type(self).mode == "empty" else text}}],
                   "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}, "model": "m1"}
        raw = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def server() -> Iterator[str]:
    ModelServer.mode = "ok"
    srv = ThreadingHTTPServer(("127.0.0.1", 0), ModelServer)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


async def test_openai_embedder_normalises_and_learns_dim(server: str) -> None:
    e = OpenAIEmbedder(server, "emb", api_key="k", timeout_s=1.0, query_prefix="query: ")
    await e.probe()
    assert e.dim == 4
    v = await e.embed_query("abc")
    assert np.isclose(np.linalg.norm(v), 1.0) and v[0] > v[1]  # len("query: abc") = 10
    m = await e.embed_passages(["a", "bb", "ccc"])
    assert m.shape == (3, 4) and e.usage_tokens == 21  # probe, query, passages
    plain = OpenAIEmbedder(server, "emb")
    assert plain.name != e.name  # a prefix changes the vectors: another model, by name
    assert plain.name == OpenAIEmbedder(server, "emb", api_key="other").name


def test_embedding_prefixes_come_from_config() -> None:
    from skald.runtime.host.config import Config
    from skald.runtime.host.worker import make_embedder

    cfg = Config.from_env(env={"SKALD_EMBEDDER": "openai", "SKALD_EMBED_BASE_URL": "http://127.0.0.1:9/v1",
                               "SKALD_EMBED_QUERY_PREFIX": "query: ", "SKALD_EMBED_PASSAGE_PREFIX": "passage: "})
    e = make_embedder(cfg)
    assert isinstance(e, OpenAIEmbedder) and (e.query_prefix, e.passage_prefix) == ("query: ", "passage: ")


async def test_openai_chat_reports_usage_and_times_out(server: str) -> None:
    chat = OpenAIChat(server, "m1", timeout_s=0.5)
    c = await chat.complete("sys", "user")
    assert c.text == "A short model summary." and c.usage.total_tokens == 16 and c.model == "m1"
    ModelServer.mode = "hang"
    with pytest.raises(TimeoutError):
        await chat.complete("sys", "user", timeout_s=0.3)


@pytest.mark.parametrize("mode", ["fail", "hang", "empty"])
async def test_llm_summarizer_falls_back_to_extract(server: str, mode: str) -> None:
    s = LLMSummarizer(OpenAIChat(server, "m1", timeout_s=0.3))
    ok = await s.file_abstract("a.md", "# Title\n\nFirst sentence. Second one.")
    assert ok == "A short model summary." and s.fallbacks == 0 and s.usage_tokens == 16
    ModelServer.mode = mode
    got = await s.file_abstract("a.md", "# Title\n\nFirst sentence. Second one.")
    assert got == "Title. First sentence. Second one." and s.fallbacks == 1


async def test_transient_failures_are_retried_honouring_retry_after() -> None:
    """429 with Retry-After, then 503, then success: one call, two retries, the server's pause kept;
    a 400 is not retried; a Retry-After past the deadline gives up inside the deadline."""
    from skald.runtime.models.retries import Stats, post_json
    from support.stubs import ModelStub, chat

    script: list[tuple[int, Any, float]] = []
    seen: list[float] = []

    def respond(path: str, body: dict) -> tuple[int, Any, float]:
        seen.append(time.monotonic())
        return script.pop(0) if script else (200, chat("finally"), 0)

    stub = ModelStub(respond, headers={429: {"Retry-After": "1"}})
    try:
        script[:] = [(429, {"error": "slow down"}, 0), (503, {"error": "busy"}, 0)]
        llm = OpenAIChat(stub.url, "m1", timeout_s=10.0)
        c = await llm.complete("sys", "user")
        assert c.text == "finally" and llm.stats.retries == 2 and len(seen) == 3
        assert seen[1] - seen[0] >= 0.95  # the server asked for a second
        script[:] = [(400, {"error": "bad request"}, 0)]
        with pytest.raises(HTTPStatusError):
            await llm.complete("sys", "user")
        assert llm.stats.retries == 2  # not retried
        script[:] = [(429, {"error": "slow down"}, 0)] * 5
        stats = Stats()
        client = JsonClient()
        t0 = time.monotonic()
        with pytest.raises(HTTPStatusError):
            await post_json(client, f"{stub.url}/chat/completions", {}, 0.5, stats)
        assert time.monotonic() - t0 < 2.0 and stats.gave_up == 1
        # a 503, then a retry the deadline cuts off: the server's failure is what is reported
        script[:] = [(503, {"error": "busy"}, 0), (503, {"error": "busy"}, 1.5)]
        with pytest.raises(HTTPStatusError) as failed:
            await post_json(client, f"{stub.url}/chat/completions", {}, 0.5, stats)
        assert failed.value.status == 503 and stats.gave_up == 2
        # no answer at all within the deadline is a timeout
        script[:] = [(200, chat("late"), 1.5)]
        with pytest.raises(TimeoutError):
            await post_json(client, f"{stub.url}/chat/completions", {}, 0.3, stats)
        await client.close()
    finally:
        stub.close()
