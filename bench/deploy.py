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


async def local(name: str, embedder: str = "hash", tmp: Path | None = None, timeout_s: float = 30.0,
                **settings: object) -> Local:
    """An embedded nats-server and every actor in this process (no snapshots), in `tmp` or a new
    temporary directory; `settings` override Config fields."""
    tmp = tmp or Path(tempfile.mkdtemp(prefix=f"skald-bench-{name}-"))
    srv = EmbeddedNats(tmp / "nats", port=-1)
    url = srv.start()
    cfg = Config.from_env(env={}, data_dir=tmp / "data", nats_url=url, embedder=embedder)
    cfg.snapshot_interval_s = 3600
    for k, v in settings.items():
        setattr(cfg, k, v)
    worker = Worker(cfg, embedded=False)
    await worker.start()
    return Local(tmp, srv, worker, await SkaldClient.connect(url, timeout_s=timeout_s))


async def local_with_folder(name: str, files: dict[str, bytes], embedder: str, tmp: Path,
                            **settings: object) -> tuple[Local, Path]:
    """`local`, and `files` written to a folder beside it, ready for `resources.add`."""
    d = await local(name, embedder, tmp, timeout_s=1800.0, **settings)
    src = tmp / "src"
    src.mkdir()
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    return d, src


def start_worker(url: str, data: Path, prefix: str, actors: str, **env: str) -> subprocess.Popen[str]:
    """`skald worker --actors ...` as its own process; returns once it says it is ready."""
    return processes.worker(url, data, prefix, actors, ready=True, stderr=subprocess.DEVNULL, **env)
