"""The Procfile as a person runs it (`honcho start`): nats-server and one worker per actor, each
its own process on one host; every actor serves, and stopping it all prints no traceback (workers
whose server went first say so in a line)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from skald.messages import errors
from skald.runtime.client.api import SkaldClient
from support.cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
HONCHO = str(Path(sys.executable).parent / "honcho")


async def test_the_procfile_runs_every_actor_and_stops_without_a_traceback(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "SKALD_DATA_DIR": str(tmp_path / "data"), "SKALD_NATS_PORT": str(port),
           "SKALD_EMBEDDER": "hash", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("SKALD_NATS_URL", None)
    honcho = subprocess.Popen([HONCHO, "start", "-f", str(ROOT / "Procfile"), "-d", str(ROOT)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        served = False
        for _ in range(120):
            try:
                async with await SkaldClient.connect(f"nats://127.0.0.1:{port}", timeout_s=5) as c:
                    await c.write("viking://resources/ops/caddy.md", "# Caddy\n\nCaddy listens on port 1935.\n")
                    found = await c.find("caddy port")
                    await c.add_message("s1", "user", "caddy moved to 1935")
                    block = await c.context("which port is caddy on", max_tokens=300)
                    served = bool(found.resources) and "1935" in block.rendered
                    break
            except (errors.Unavailable, errors.DeadlineExceeded):
                await asyncio.sleep(0.5)  # the server or a worker still starting
        assert served
    finally:
        os.killpg(honcho.pid, signal.SIGTERM)  # as Ctrl-C or a service stop reaches every process
        out, _ = honcho.communicate(timeout=60)
    assert "Traceback" not in out, out[-4000:]
    for actor in ("indexer", "retriever", "session", "archive", "assembler"):
        assert f"{actor}." in out  # honcho prefixes each process's lines with its name
