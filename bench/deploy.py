"""Deployments the benchmarks run against: every actor in this process, or one actor per process."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from skald.runtime.bus.natsserver import EmbeddedNats
from skald.runtime.client.api import SkaldClient
from skald.runtime.host.config import Config
from skald.runtime.host.worker import Worker
from support import processes


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
    with contextlib.suppress(ImportError):  # as `skald up` does once ready (absent from older refs' code)
        from skald.runtime.host import heap

        heap.settle()
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


def start_worker(url: str, data: Path, prefix: str, actors: str, code: Path | None = None,
                 **env: str) -> subprocess.Popen[str]:
    """`skald worker --actors ...` as its own process; returns once it says it is ready. `code`:
    a directory from `code_at` to run an earlier commit's code instead of this tree's."""
    return processes.worker(url, data, prefix, actors, ready=True, stderr=subprocess.DEVNULL,
                            env={"PYTHONPATH": str(code)} if code else None, **env)


def code_at(ref: str, tmp: Path) -> Path:
    """A directory that, first on PYTHONPATH, makes `skald.*` import the code of git `ref`: the
    ref's tree (`git archive`) and a `skald` folder linking its four roots. Python's path finder
    runs before the editable install's, so a worker started with it runs that code; checked
    here, so a bench never reports this tree's figures under the ref's name."""
    root = Path(__file__).resolve().parent.parent
    tree = tmp / f"code-{ref.replace('/', '_')}"
    tree.mkdir(parents=True)
    blob = subprocess.run(["git", "-C", str(root), "archive", ref], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(tree, filter="data")
    pkg = tree / "path" / "skald"
    pkg.mkdir(parents=True)
    for part in ("messages", "store", "actors", "runtime"):
        (pkg / part).symlink_to(tree / part, target_is_directory=True)
    probe = ("import importlib\nfor m in ('runtime', 'actors.session.handlers', 'store.sessions', "
             "'messages.sessions'):\n    print(importlib.import_module('skald.' + m).__file__)")
    found = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(tree / "path")},
                           capture_output=True, text=True, check=True).stdout.split()
    if not found or any(not f.startswith(str(tree)) for f in found):
        raise RuntimeError(f"{ref}'s code does not take precedence over this tree's ({found})")
    return tree / "path"
