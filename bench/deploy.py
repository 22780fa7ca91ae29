"""Deployments the benchmarks run against: every actor in this process, or one actor per process."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from skald.runtime.client import SkaldClient
from skald.runtime.config import Config
from skald.runtime.natsserver import EmbeddedNats
from skald.runtime.worker import Worker
from tests.support import processes


@dataclass
class Local:
    tmp: Path
    server: EmbeddedNats
    worker: Worker
    client: SkaldClient

    async def close(self) -> None:
        await self.client.close()
        await self.worker.stop()
        self.server.stop()


async def local(name: str) -> Local:
    """An embedded nats-server and every actor in this process (hashed embedder, no snapshots)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"skald-bench-{name}-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    url = srv.start()
    cfg = Config.from_env(env={}, data_dir=tmp / "data", nats_url=url, embedder="hash")
    cfg.snapshot_interval_s = 3600
    worker = Worker(cfg, embedded=False)
    await worker.start()
    return Local(tmp, srv, worker, await SkaldClient.connect(url))


def start_worker(url: str, data: Path, prefix: str, actors: str, **env: str) -> subprocess.Popen[str]:
    """`skald worker --actors ...` as its own process; returns once it says it is ready."""
    return processes.worker(url, data, prefix, actors, ready=True, stderr=subprocess.DEVNULL, **env)
