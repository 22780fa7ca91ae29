"""A small real HTTP server for model endpoints (chat, embeddings, rerank), scripted by the test."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Respond = Callable[[str, dict[str, Any]], tuple[int, Any, float]]


class ModelStub:
    def __init__(self, respond: Respond, headers: dict[int, dict[str, str]] | None = None) -> None:
        """`headers`: extra response headers by status (a 429's Retry-After)."""
        self.respond = respond
        extra = headers or {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                stub.calls.append((self.path, body))
                status, out, delay = stub.respond(self.path, body)
                if delay:
                    time.sleep(delay)
                raw = out if isinstance(out, bytes) else json.dumps(out).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    for k, v in extra.get(status, {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def chat(text: str, tokens: int = 20) -> dict[str, Any]:
    return {"choices": [{"message": {"content": text}}], "model": "stub",
            "usage": {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5}}


def phase2_answer(prompt: str, extra: int = 0) -> dict[str, Any]:
    """A well-formed Phase 2 answer for `prompt` (one summary per checkpoint source, `extra` more)."""
    n = len(re.findall(r'<checkpoint_source index="', prompt)) + extra
    return chat(json.dumps({"overview": "# Working memory\n\nThe user is deploying billing.",
                            "checkpoint_summaries": [f"summary {i}" for i in range(n)],
                            "memories": [{"category": "events", "content": "# Summary\n\nBilling deployed."}]}))


def counting_model() -> ModelStub:
    """A model whose every answer is new (a counter in it): Phase 2 (the call that wants JSON) with
    `(answer N)` in its memory, anything else `Model summary number N`. A state rebuilt by asking it
    again cannot match the original byte for byte."""
    import itertools

    n = itertools.count()

    def respond(path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
        user = body["messages"][1]["content"]
        if body.get("response_format"):
            answer = phase2_answer(user)
            msg = answer["choices"][0]["message"]
            msg["content"] = msg["content"].replace("Billing deployed", f"Billing deployed (answer {next(n)})")
            return 200, answer, 0
        return 200, chat(f"Model summary number {next(n)} of {user.splitlines()[0]}."), 0

    return ModelStub(respond)


def dead_url() -> str:
    """An OpenAI-style base URL on a port nothing listens on: every call is refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"
