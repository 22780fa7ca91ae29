"""`skald http` with its bus gone, as a process: health says so, a request is refused at once
with the retry hint (not held for its whole deadline), and SIGTERM stops it cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from skald.runtime.bus.natsserver import EmbeddedNats
from support.cluster import free_port

SKALD = str(Path(sys.executable).parent / "skald")


def wait_serving(base: str, proc: subprocess.Popen[str]) -> None:
    for _ in range(300):
        assert proc.poll() is None, "skald http exited while starting"
        try:
            httpx.get(f"{base}/health", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("skald http never answered")


def test_the_gateway_without_its_bus_says_so_refuses_at_once_and_stops_cleanly(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "js", port=free_port())
    url = server.start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([SKALD, "http", "--nats-url", url, "--port", str(port)], stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_serving(base, proc)
        up = httpx.get(f"{base}/health")
        assert up.status_code == 200 and up.json()["status"] == "ok"
        server.stop()
        for _ in range(200):  # until the client has seen the connection go
            down = httpx.get(f"{base}/health")
            if down.status_code != 200:
                break
            time.sleep(0.05)
        assert down.status_code == 503 and down.json()["status"] == "unavailable"
        found = httpx.post(f"{base}/api/v1/search/find", json={"query": "anything"}, timeout=60)
        assert found.status_code == 503, found.text  # was 504 DEADLINE_EXCEEDED after 30 s
        assert found.json()["error"]["code"] == "UNAVAILABLE" and found.headers["Retry-After"]
        assert found.json()["error"]["details"]["retry_after_ms"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        server.stop()
    assert proc.returncode == 0 and "Traceback" not in err, err
